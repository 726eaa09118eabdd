"""Start real aiohttp applications on loopback for tests: a bound socket, a URL, a clean stop."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from aiohttp import web


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (for subprocess servers)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@asynccontextmanager
async def serve(app: web.Application, *, host: str = "127.0.0.1") -> AsyncIterator[str]:
    """Run ``app`` on an ephemeral loopback port; yield its base URL; clean up on exit."""
    runner = web.AppRunner(app, handle_signals=False, shutdown_timeout=2.0)
    await runner.setup()
    site = web.TCPSite(runner, host, 0)
    await site.start()
    server = site._server
    assert server is not None
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"http://{host}:{port}"
    finally:
        await runner.cleanup()
