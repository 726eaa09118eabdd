"""A TCP relay on loopback that misbehaves on demand, steered by events:
- ``freeze``/``thaw``: it keeps accepting and holding connections but stops moving bytes, like a
  replica that hangs (accepts, never answers);
- ``stall``: it stops accepting; once its small backlog is full (``BACKLOG`` + 1 connections),
  new connections hang in the handshake, like a replica whose connects are slow. Established
  connections keep working. When ``stall`` returns, no accept is pending any more, so a test
  that fills the backlog next fills it for good; ``unstall`` accepts again.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import asynccontextmanager
from typing import Any
from urllib.parse import urlsplit

BACKLOG = 8


class Relay:
    def __init__(self, target: str) -> None:
        parts = urlsplit(target)
        self._host, self._port = parts.hostname or "127.0.0.1", parts.port or 80
        self._running = asyncio.Event()
        self._running.set()
        self._acceptor: asyncio.Task[None] | None = None
        self._accepting: Callable[[], Coroutine[Any, Any, None]] | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self.url = ""

    def freeze(self) -> None:
        self._running.clear()

    def thaw(self) -> None:
        self._running.set()

    def unstall(self) -> None:
        """Accept again (the connections waiting in the backlog first)."""
        if self._acceptor is None and self._accepting is not None:
            self._acceptor = asyncio.create_task(self._accepting())

    async def stall(self) -> None:
        """Stop accepting. Cancelling the acceptor withdraws its pending accept before it
        returns, so no connection is accepted afterwards (a late one would free a backlog slot)."""
        if self._acceptor is not None:
            self._acceptor.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._acceptor
            self._acceptor = None

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
    loop = asyncio.get_running_loop()
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(BACKLOG)  # small, so a stalled relay fills up at once
    listener.setblocking(False)
    link.url = f"http://127.0.0.1:{listener.getsockname()[1]}"

    async def accept() -> None:
        while True:
            conn, _ = await loop.sock_accept(listener)
            reader, writer = await asyncio.open_connection(sock=conn)
            task = asyncio.create_task(link._serve(reader, writer))
            link._tasks.add(task)
            task.add_done_callback(link._tasks.discard)

    link._accepting = accept
    link._acceptor = asyncio.create_task(accept())
    try:
        yield link
    finally:
        link.thaw()
        await link.stall()
        listener.close()
        await link.close()
