"""The jobs' way to the package registries: an HTTPS CONNECT relay on the group's bridge.

A job's namespace has no route out; pip reaches PyPI through ``HTTPS_PROXY=http://<bridge>:<port>``
as it would through a corporate proxy. ``CONNECT host:443`` is relayed for any host (TLS end to
end: nothing is read; the jobs are the plan's own commands, so no further filter is kept);
anything else gets 405. Written by hand (about 60 lines of asyncio) rather than
pulled in as a dependency: it serves one rehearsal's pip runs and nothing else. Bounds: the
request head (``MAX_HEAD``), the connect timeout, tunnels at once (``MAX_TUNNELS``).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading

MAX_HEAD = 8192
CONNECT_TIMEOUT_S = 30.0
MAX_TUNNELS = 64
CHUNK = 65536


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(OSError, ConnectionError):
        while chunk := await reader.read(CHUNK):
            writer.write(chunk)
            await writer.drain()
    with contextlib.suppress(OSError, ConnectionError):
        writer.close()


class Tunnel:
    """``start(host)`` serves on ``host`` from a thread; ``url`` is what ``HTTPS_PROXY`` takes."""

    def __init__(self) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="tunnel", daemon=True)
        self._slots = asyncio.Semaphore(MAX_TUNNELS)
        self._server: asyncio.Server | None = None
        self._open: set[asyncio.StreamWriter] = set()
        self.url = ""

    def start(self, host: str) -> str:
        self._thread.start()
        server = asyncio.run_coroutine_threadsafe(
            asyncio.start_server(self._serve, host, 0), self._loop
        ).result(CONNECT_TIMEOUT_S)
        self._server = server
        port = server.sockets[0].getsockname()[1]
        self.url = f"http://{host}:{port}"
        return self.url

    def close(self) -> None:
        """Stop serving, cut every tunnel still open, and close the loop."""
        if self._thread.is_alive():
            asyncio.run_coroutine_threadsafe(self._shut(), self._loop).result(CONNECT_TIMEOUT_S)
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=10)
        self._loop.close()

    async def _shut(self) -> None:
        for writer in list(self._open):
            writer.close()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
        tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._open.add(writer)
        try:
            await self._relay(reader, writer)
        finally:
            self._open.discard(writer)
            writer.close()

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        async with self._slots:
            try:
                head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), CONNECT_TIMEOUT_S)
            except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError, OSError):
                return
            method, _, rest = head[:MAX_HEAD].decode("latin-1").partition(" ")
            host, _, port = rest.split(" ", 1)[0].rpartition(":")
            if method != "CONNECT" or port != "443" or not host:
                writer.write(b"HTTP/1.1 405 Method Not Allowed\r\nContent-Length: 0\r\n\r\n")
                return
            try:
                upstream = await asyncio.wait_for(
                    asyncio.open_connection(host.strip("[]"), 443), CONNECT_TIMEOUT_S
                )
            except (OSError, TimeoutError):
                writer.write(b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n")
                return
            self._open.add(upstream[1])
            writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
            try:
                await asyncio.gather(_pipe(reader, upstream[1]), _pipe(upstream[0], writer))
            finally:
                self._open.discard(upstream[1])
                upstream[1].close()
