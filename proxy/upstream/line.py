"""The data requests waiting for a connection to a replica, one line per replica (the
connection pool's, ``connpool``): first come, first served.

A waiter (``wait``) is handed either a connection another request released (``hand_over``: a
burst reuses what it opened) or a connect slot (``next``: it may open one). One that leaves first
(its deadline, its client gone) passes on what it was given in the same turn of the loop, so no
connection and no slot is lost; ``fail`` ends a replica's line (its ejection). O(1) per waiter
served; a waiter leaving early is taken off the line in O(line).
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable

from proxy.upstream.connection import Connection
from proxy.upstream.errors import AnswerTimeout


class Turn:
    """A waiter's place: handed a connection, or told a connect may start (``None``)."""

    __slots__ = ("future",)

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.future: asyncio.Future[Connection | None] = loop.create_future()


class Line:
    def __init__(self, idle: Callable[[Connection], None]) -> None:
        """``idle``: where a connection goes when nobody waits for it."""
        self._idle = idle
        self._turns: dict[str, deque[Turn]] = {}  # by origin key

    def waiting(self, key: str) -> int:
        return len(self._turns.get(key, ()))

    async def wait(self, key: str, deadline: float) -> Connection | None:
        """Until ``key``'s next released connection, or a connect slot (None); by ``deadline``
        (the loop's time) or ``AnswerTimeout``."""
        loop = asyncio.get_running_loop()
        turn = Turn(loop)
        turns = self._turns.setdefault(key, deque())
        turns.append(turn)
        try:
            async with asyncio.timeout(max(deadline - loop.time(), 0.0)):
                return await turn.future
        except TimeoutError:
            self._leave(turns, key, turn)
            raise AnswerTimeout(f"no connection to {key} came free in time") from None
        except asyncio.CancelledError:
            self._leave(turns, key, turn)
            raise
        finally:  # a turn served was taken off the line by whoever served it
            if not turns and self._turns.get(key) is turns:
                del self._turns[key]

    def hand_over(self, connection: Connection) -> bool:
        """Give a released connection to the first waiter for its replica (False: none)."""
        turns = self._turns.get(connection.origin_key)
        while turns:
            turn = turns.popleft()
            if not turn.future.done():
                turn.future.set_result(connection)
                return True
        return False

    def next(self, key: str) -> None:
        """A connect ended: the first waiter for ``key`` may start one (or take what is idle)."""
        turns = self._turns.get(key)
        while turns:
            turn = turns.popleft()
            if not turn.future.done():
                turn.future.set_result(None)
                return

    def fail(self, key: str, error: BaseException) -> None:
        """Every waiter for ``key`` fails with ``error`` (its replica was given up on)."""
        for turn in self._turns.pop(key, ()):
            if not turn.future.done():
                turn.future.set_exception(error)

    def _leave(self, turns: deque[Turn], key: str, turn: Turn) -> None:
        """A waiter leaves early: off the line if still on it (O(line)), and what it was
        given, if anything, goes to the next."""
        if turn in turns:
            turns.remove(turn)
        future = turn.future
        if not future.done() or future.cancelled() or future.exception() is not None:
            return
        given = future.result()
        if given is None:
            self.next(key)
        elif not self.hand_over(given):
            self._idle(given)
