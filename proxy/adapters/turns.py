"""Turns: one load or unload of a given adapter name at a time, in the order they arrived.

A turn is taken when the call arrives (synchronously, before any await), so a background
unload answered to TRL keeps its place ahead of a load that comes later, whatever the event
loop runs first. A turn is waited for with ``async with``; a turn whose task never ran (or was
cancelled while it waited) passes its place on once the turn before it is over (``abandon``).
"""

from __future__ import annotations

import asyncio
from types import TracebackType


class Turns:
    def __init__(self) -> None:
        self._tails: dict[str, asyncio.Future[None]] = {}  # each name's last turn taken

    def take(self, name: str) -> Turn:
        before = self._tails.get(name)
        mine: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._tails[name] = mine
        return Turn(self, name, before, mine)

    def __len__(self) -> int:
        return len(self._tails)

    def _over(self, name: str, mine: asyncio.Future[None]) -> None:
        if not mine.done():
            mine.set_result(None)
        if self._tails.get(name) is mine:
            del self._tails[name]


class Turn:
    def __init__(
        self,
        turns: Turns,
        name: str,
        before: asyncio.Future[None] | None,
        mine: asyncio.Future[None],
    ) -> None:
        self._turns, self.name, self._before, self._mine = turns, name, before, mine

    async def __aenter__(self) -> None:
        if self._before is not None and not self._before.done():
            try:
                await asyncio.shield(self._before)
            except asyncio.CancelledError:
                self.abandon()
                raise

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.abandon()

    def abandon(self) -> None:
        """This turn is over (or never began): the next one goes once the one before is over.
        Idempotent."""
        if self._before is None or self._before.done():
            self._turns._over(self.name, self._mine)
        else:
            self._before.add_done_callback(lambda _: self._turns._over(self.name, self._mine))
