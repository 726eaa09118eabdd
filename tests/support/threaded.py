"""A proxy stack served from a background thread, for synchronous tests (hypothesis, sockets)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from concurrent.futures import Future
from contextlib import contextmanager
from typing import Any

from tests.support.fleet import Stack, run_stack


@contextmanager
def threaded_stack(n: int = 2, **settings: Any) -> Iterator[Stack]:
    """``run_stack`` on its own event loop in a daemon thread; stopped on exit."""
    ready: Future[Stack] = Future()
    stop: asyncio.Event | None = None
    loop = asyncio.new_event_loop()

    async def main() -> None:
        nonlocal stop
        stop = asyncio.Event()
        try:
            async with run_stack(n, **settings) as stack:
                ready.set_result(stack)
                await stop.wait()
        except BaseException as exc:
            if not ready.done():
                ready.set_exception(exc)
            raise

    thread = threading.Thread(target=loop.run_until_complete, args=(main(),), daemon=True)
    thread.start()
    try:
        yield ready.result(timeout=30)
    finally:
        assert stop is not None
        loop.call_soon_threadsafe(stop.set)
        thread.join(timeout=30)
        loop.close()
