"""Waiting on conditions in tests: poll a condition (every 10 ms unless told), fail with what
was awaited.

Tests wait on events and states, never on fixed sleeps; the timeouts are generous bounds for a
busy machine, not expected durations. A longer ``interval`` suits a check that costs something
itself (a subprocess, a request to a server under measured load).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Awaitable, Callable

POLL_S = 0.01


async def wait_for(
    predicate: Callable[[], object],
    timeout: float = 5.0,
    what: str = "condition",
    *,
    interval: float = POLL_S,
) -> None:
    """Until ``predicate()`` (sync) is true; AssertionError after ``timeout`` seconds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not predicate():
        if loop.time() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        await asyncio.sleep(interval)


async def eventually(
    check: Callable[[], Awaitable[bool]],
    timeout: float = 5.0,
    what: str = "condition",
    *,
    interval: float = POLL_S,
) -> None:
    """Until ``await check()`` is true; AssertionError after ``timeout`` seconds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not await check():
        if loop.time() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        await asyncio.sleep(interval)


def until(
    predicate: Callable[[], object],
    timeout: float = 5.0,
    what: str = "condition",
    *,
    interval: float = POLL_S,
) -> None:
    """``wait_for`` for a synchronous test (one that drives a blocking client)."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        threading.Event().wait(interval)
