"""A TCP relay on loopback that can freeze: it keeps accepting and holding connections but stops
moving bytes, like a replica that hangs (accepts, never answers). Steered by ``freeze``/``thaw``.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from urllib.parse import urlsplit


class Relay:
    def __init__(self, target: str) -> None:
        parts = urlsplit(target)
        self._host, self._port = parts.hostname or "127.0.0.1", parts.port or 80
        self._running = asyncio.Event()
        self._running.set()
        self._tasks: set[asyncio.Task[None]] = set()
        self.url = ""

    def freeze(self) -> None:
        self._running.clear()

    def thaw(self) -> None:
        self._running.set()

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError, asyncio.CancelledError):
            while data := await reader.read(65536):
                await self._running.wait()
                writer.write(data)
                await writer.drain()
        writer.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await self._running.wait()  # a frozen replica accepts, then says nothing
        try:
            up_reader, up_writer = await asyncio.open_connection(self._host, self._port)
        except OSError:
            writer.close()
            return
        for task in (
            asyncio.create_task(self._pipe(reader, up_writer)),
            asyncio.create_task(self._pipe(up_reader, writer)),
        ):
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)


@asynccontextmanager
async def relay(target: str) -> AsyncIterator[Relay]:
    """A relay to ``target`` (a base URL) on an ephemeral loopback port."""
    link = Relay(target)

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await link._serve(reader, writer)

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    link.url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    try:
        yield link
    finally:
        link.thaw()
        server.close()
        await link.close()
        await server.wait_closed()
