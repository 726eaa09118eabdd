"""aiohttp apps served from an event loop in a daemon thread, for synchronous tests of a
blocking client (huggingface_hub, ``deploy``)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from contextlib import AsyncExitStack
from typing import Any, TypeVar

from aiohttp import web

from tests.support.servers import serve

T = TypeVar("T")


class BackgroundServers:
    """Serve aiohttp apps on loopback from an event loop in a daemon thread.

    ``start(app)`` returns the app's base URL; ``close()`` cleans every app up and stops the loop.
    ``call(coro)`` runs a coroutine on that loop (to touch app state from a test thread).
    """

    def __init__(self) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="servers", daemon=True)
        self._thread.start()
        self._exits = AsyncExitStack()

    def call(self, coro: Coroutine[Any, Any, T], timeout_s: float = 10.0) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout_s)

    def start(self, app: web.Application) -> str:
        async def enter() -> str:
            return await self._exits.enter_async_context(serve(app))

        return self.call(enter())

    def close(self) -> None:
        try:
            self.call(self._exits.aclose())
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=10)
            self._loop.close()
