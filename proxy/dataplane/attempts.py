"""Attempts waiting on a replica, by replica: what an ejection fails over.

An attempt registers its task from the moment it is sent until nothing more can go wrong
unseen by the client: a whole answer read (before it is written to the client), a stream's head
(before its first byte is). When the pool ejects the replica, whatever the cause (health, a
circuit, another request's transport error), or removes it, each such attempt is cancelled with
``EJECTED`` and the forwarder sends the request to another replica holding its model, within
``--max-attempts``. Re-sends never add load: the cancelled attempt closes its upstream
connection, which cancels the generation on the replica (a slow replica loses that request
rather than serving it twice). A replica that is only draining keeps its attempts.

Cost: a set add and discard per attempt; the pool's changes look only at replicas with attempts.
"""

from __future__ import annotations

import asyncio
from weakref import WeakSet

from proxy.fleet.pool import ReplicaPool
from proxy.fleet.replica import Health, Replica

EJECTED = "its replica was ejected"  # the cancel message an ejected attempt gets


class Waiting:
    """One attempt's registration; ``done`` ends it early (the client gets bytes from then)."""

    __slots__ = ("_task", "_tasks")

    def __init__(self, tasks: set[asyncio.Task[object]], task: asyncio.Task[object]) -> None:
        self._tasks, self._task = tasks, task

    def done(self) -> None:
        self._tasks.discard(self._task)


class Attempts:
    def __init__(self, pool: ReplicaPool) -> None:
        self._by_replica: dict[str, set[asyncio.Task[object]]] = {}
        self._ejected: WeakSet[asyncio.Task[object]] = WeakSet()  # cancelled for an ejection
        pool.follow(self._changed)

    def waiting(self, replica: Replica) -> Waiting:
        """The current task waits on ``replica`` until ``done`` (call it in a ``finally``)."""
        task = asyncio.current_task()
        assert task is not None
        tasks = self._by_replica.get(replica.id)
        if tasks is None:
            tasks = self._by_replica[replica.id] = set()
        tasks.add(task)
        return Waiting(tasks, task)

    def ejected(self) -> bool:
        """The cancel the current task is handling is an ejection's alone (the client's own, if
        any, still stands): it is taken back, and the attempt may be sent elsewhere. (Known by
        the task, not the cancel's message: a connect under way raises a cancel of its own.)"""
        task = asyncio.current_task()
        if task is None or task not in self._ejected:
            return False
        self._ejected.discard(task)
        return task.uncancel() == 0

    def _changed(self, pool: ReplicaPool) -> None:
        for rid, tasks in self._by_replica.items():
            if not tasks:
                continue
            replica = pool.get(rid)
            if replica is None or replica.health is Health.EJECTED:
                for task in tasks:
                    task.cancel(EJECTED)
                    self._ejected.add(task)
                tasks.clear()
