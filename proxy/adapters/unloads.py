"""Unloads carried out behind TRL's back: answered at once, done in the background.

Each unload is numbered when it arrives; a load records the number it arrived after, and
before it loads on a replica waits for every earlier unload there (so no replica ever holds
more than the window allows: vLLM would evict an adapter in use to make room). Every call is
bounded (``broadcast.UNLOAD_TIMEOUT_S``); a replica that does not answer is ejected by that
call and readmitted in step. A replica that answers an unload with an error owes it: it is
retried once before that replica's next load (at most ``MAX_OWED`` names per replica, oldest
forgotten first, each logged). TRL's unload of a name whose previous unload is still waiting for
its turn, with no load of that name queued between them, is that same unload: merged into it,
so repeating one costs nothing (``waiting``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

from adapter_receiver.wire import shown
from proxy.fleet.replica import Replica

log = logging.getLogger("proxy.adapters")

MAX_OWED = 64  # names a replica may owe an unload of
SLOW_WAIT_S = 1.0  # a load that waits longer than this for unloads says so in the log


@dataclass(eq=False)
class PendingUnload:
    seq: int
    name: str
    dispatched: asyncio.Event = field(default_factory=asyncio.Event)
    on: dict[str, asyncio.Task[bool]] = field(default_factory=dict)


class Unloads:
    def __init__(self, unload_on: Callable[[Replica, str], Coroutine[Any, Any, bool]]) -> None:
        self._unload_on = unload_on
        self._seq = 0
        self._open: dict[int, PendingUnload] = {}  # by number, until carried out on every target
        self._owed: dict[str, dict[str, None]] = {}  # replica id -> names, oldest first
        # TRL's unloads not begun, with no load of their name queued after them (merge targets).
        self._waiting: dict[str, PendingUnload] = {}

    @property
    def seq(self) -> int:
        """The last unload's number: a load arriving now waits for every unload up to it."""
        return self._seq

    def __len__(self) -> int:
        return len(self._open)

    def owed(self) -> int:
        return sum(len(names) for names in self._owed.values())

    def queue(self, name: str, *, mergeable: bool = False) -> PendingUnload:
        self._seq += 1
        unload = self._open[self._seq] = PendingUnload(self._seq, name)
        if mergeable:
            self._waiting[name] = unload
        return unload

    def waiting(self, name: str) -> bool:
        """An unload of ``name`` is queued, not begun, and no load of it was queued since."""
        return name in self._waiting

    def overtaken(self, name: str) -> None:
        """A load of ``name`` was queued: a later unload of it is a new one."""
        self._waiting.pop(name, None)

    def started(self, unload: PendingUnload) -> None:
        if self._waiting.get(unload.name) is unload:
            del self._waiting[unload.name]

    async def run(self, unload: PendingUnload, targets: list[Replica]) -> None:
        """Carry ``unload`` out on ``targets``, one call each, at once."""
        unload.on = {
            r.id: asyncio.create_task(self._unload_on(r, unload.name), name=f"unload {r.id}")
            for r in targets
        }
        unload.dispatched.set()
        try:
            done = await asyncio.gather(*unload.on.values())
        finally:
            self._open.pop(unload.seq, None)
        for replica, ok in zip(targets, done, strict=True):
            if not ok and replica.routable:  # it answered, with an error: it owes the unload
                self._owe(replica, unload.name)

    def abandon(self, unload: PendingUnload) -> None:
        """``unload`` will not be carried out (nothing to unload, or shutting down)."""
        unload.dispatched.set()
        self._open.pop(unload.seq, None)
        self.started(unload)

    async def cleared(self, replica: Replica, before: int | None = None) -> None:
        """Until every unload numbered up to ``before`` (every one so far when None) is over
        on ``replica``, and what it owes has been retried once."""
        started = time.perf_counter()
        await self._earlier(replica, before)
        waited = time.perf_counter() - started
        if waited > SLOW_WAIT_S:
            log.info("replica %s: a load waited %.2f s for the unloads before it", replica.id,
                     waited)  # fmt: skip

    async def _earlier(self, replica: Replica, before: int | None) -> None:
        for seq in sorted(self._open):
            unload = self._open.get(seq)
            if unload is None or (before is not None and seq > before):
                continue
            await unload.dispatched.wait()  # bounded: it waits only for that name's turn
            task = unload.on.get(replica.id)
            if task is not None:
                await asyncio.wait([task])
        owed = self._owed.get(replica.id)
        for name in list(owed or ()):
            if await self._unload_on(replica, name) or not replica.routable:
                owed.pop(name, None)  # type: ignore[union-attr]
        if owed is not None and not owed:
            del self._owed[replica.id]

    def _owe(self, replica: Replica, name: str) -> None:
        owed = self._owed.setdefault(replica.id, {})
        owed[name] = None
        log.warning("replica %s owes the unload of %s: retried before its next load", replica.id,
                    shown(name))  # fmt: skip
        while len(owed) > MAX_OWED:
            forgotten = next(iter(owed))
            del owed[forgotten]
            log.warning("replica %s: the unload of %s is no longer retried (over %d owed)",
                        replica.id, shown(forgotten), MAX_OWED)  # fmt: skip
