"""The limiter's wait queues: one FIFO per run, served by weighted fair share, work-conserving.

With several runs on one fleet (``proxy.runs``) each run waits in a FIFO of its own, the default
run (the bare path) too; a class is its run, whose ``weight`` it reads. When a slot frees, it
goes to the waiting class furthest below its weighted share of the slots held: the smallest
``(running + 1) / weight`` (ties: the longest waiting). Nothing is reserved: a class with no
waiters claims nothing, so a run alone may hold every slot (no slot idles while anyone waits),
and a burst that took every slot before another run arrived gives them up one release at a time,
each to the run below its share; a running request is never preempted. Within a class, waiters
are served in arrival order, a waiter whose pick finds nothing skipped (as with one queue).

Queue bounds: a run may keep its share of ``queue_size`` waiting (``Run.share``: a declared
run's weighted share, at least 1; the default run's, all of it), so one run's burst never fills
the queue the others wait in; all classes together at most ``queue_size``. Each waiter's timeout
is its own (``queue_timeout_s`` from its arrival).

``running[c]``: the slots class ``c`` holds; the limiter is its one writer (``took``/``gave``).
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from proxy.runs.run import Run

Class = Run  # a waiter's class is its run

T = TypeVar("T")


@dataclass(eq=False, slots=True)
class Waiter(Generic[T]):
    pick: Callable[[], T | None]
    run: Class
    seq: int
    model: str | None = None  # what it asks for (whether a replica can still serve it)
    future: asyncio.Future[T] = field(default_factory=asyncio.Future)


class FairQueues:
    def __init__(self) -> None:
        self._queues: dict[Class, deque[Waiter[Any]]] = {}
        self.running: dict[Class, int] = {}
        self.size = 0  # waiters in every queue
        self._seq = 0

    @staticmethod
    def bound(run: Class, queue_size: int) -> int:
        """The waiters ``run`` may keep: its share of ``queue_size``."""
        return run.share(queue_size)

    def queued(self, run: Class) -> int:
        queue = self._queues.get(run)
        return len(queue) if queue else 0

    def push(self, pick: Callable[[], T | None], run: Class, model: str | None = None) -> Waiter[T]:
        self._seq += 1
        waiter: Waiter[T] = Waiter(pick, run, self._seq, model)
        queue = self._queues.get(run)
        if queue is None:
            queue = self._queues[run] = deque()
        queue.append(waiter)
        self.size += 1
        return waiter

    def discard(self, waiter: Waiter[Any]) -> None:
        queue = self._queues.get(waiter.run)
        if queue is None or waiter not in queue:
            return
        queue.remove(waiter)
        self.size -= 1
        if not queue:
            del self._queues[waiter.run]

    def took(self, run: Class) -> None:
        self.running[run] = self.running.get(run, 0) + 1

    def gave(self, run: Class) -> None:
        left = self.running[run] - 1
        if left:
            self.running[run] = left
        else:
            del self.running[run]

    def every(self) -> tuple[Waiter[Any], ...]:
        """Every waiter, in no particular order (a copy: safe while waiters leave)."""
        return tuple(w for queue in self._queues.values() for w in queue)

    def candidates(self) -> Iterator[Waiter[Any]]:
        """Every waiter once, in the order the next free slot should be offered: the head of
        the class furthest below its share, counting the slots granted while iterating."""
        if len(self._queues) == 1:  # one class (the single-run proxy): its FIFO
            yield from tuple(next(iter(self._queues.values())))
            return
        cursors = {run: iter(tuple(queue)) for run, queue in self._queues.items()}
        weights = {run: run.weight for run in cursors}
        heads: dict[Class, Waiter[Any]] = {}
        for run, cursor in cursors.items():
            head = next(cursor, None)
            if head is not None:
                heads[run] = head
        running = self.running
        while heads:
            run = min(heads, key=lambda c: ((running.get(c, 0) + 1) / weights[c], heads[c].seq))
            yield heads[run]
            following = next(cursors[run], None)
            if following is None:
                del heads[run]
            else:
                heads[run] = following
