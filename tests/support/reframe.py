"""An HTTP relay in front of a replica that reframes its server-sent events, as an intermediary
may (``Reframe``): the same events with CRLF or CR line ends instead of LF, comment lines inside
events and between them, a payload split over two ``data:`` lines, and the bytes written in
small pieces, each its own chunk of the chunked body (so the proxy reads them one by one).
Every other answer passes as it came. A replica that hangs up mid-answer: the relay hangs up too
(no end of the chunked body), so the proxy sees its replica fail.
"""

from __future__ import annotations

import random
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

import aiohttp
from aiohttp import web
from aiohttp.typedefs import Handler

from tests.support.servers import serve

SESSION: web.AppKey[aiohttp.ClientSession] = web.AppKey("session", aiohttp.ClientSession)
_PASSED = ("content-type", "authorization", "x-request-id")


@dataclass(frozen=True)
class Reframe:
    end: bytes = b"\n"  # each line's end
    comments: bool = False  # a comment line before and after each data line, a ping between
    lines: bool = False  # each payload over two data lines (split where JSON allows a newline)
    piece: int = 0  # > 0: the bytes written in pieces of 1 to ``piece`` bytes
    seed: int = 0

    def event(self, event: bytes) -> bytes:
        """One event as the replica framed it (``data: ...``, LF, no blank line), reframed."""
        data = event.removeprefix(b"data: ")
        parts = data.split(b',"', 1) if self.lines else [data]
        if len(parts) == 2:  # between two members: a newline there is JSON whitespace
            parts[1] = b',"' + parts[1]
        lines = []
        for part in parts:
            lines += [b": before", b"data: " + part] if self.comments else [b"data: " + part]
        if self.comments:
            lines += [b": after", b"", b": ping"]
        return b"".join(line + self.end for line in lines) + self.end


@asynccontextmanager
async def reframing(target: str, how: Reframe) -> AsyncIterator[str]:
    """A reframing relay to ``target`` (a replica's base URL): its own base URL."""
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", _relay(target, how))

    async def session(app: web.Application) -> AsyncIterator[None]:
        async with aiohttp.ClientSession() as client:
            app[SESSION] = client
            yield

    app.cleanup_ctx.append(session)
    async with serve(app) as url:
        yield url


def _relay(target: str, how: Reframe) -> Handler:
    rng = random.Random(how.seed)

    async def relay(request: web.Request) -> web.StreamResponse:
        headers = {k: v for k, v in request.headers.items() if k.lower() in _PASSED}
        body = await request.read()
        client = request.app[SESSION]
        async with client.request(
            request.method, target + request.path_qs, data=body, headers=headers
        ) as upstream:
            kind = upstream.headers.get("Content-Type", "")
            if not kind.startswith("text/event-stream"):
                answer = await upstream.read()
                return web.Response(status=upstream.status, body=answer, headers=_typed(kind))
            response = web.StreamResponse(status=upstream.status, headers=_typed(kind))
            await response.prepare(request)
            buffer = b""
            try:
                async for data in upstream.content.iter_any():
                    *events, buffer = (buffer + data).split(b"\n\n")
                    for event in events:
                        await _write(response, how.event(event), how.piece, rng)
            except aiohttp.ClientPayloadError:  # the replica hung up: so does the relay
                if request.transport is not None:
                    request.transport.close()
                return response
            await response.write_eof()
            return response

    return relay


def _typed(kind: str) -> dict[str, str]:
    return {"Content-Type": kind} if kind else {}


async def _write(response: web.StreamResponse, data: bytes, piece: int, rng: random.Random) -> None:
    if piece <= 0:
        await response.write(data)
        return
    at = 0
    while at < len(data):
        size = rng.randint(1, piece)
        await response.write(data[at : at + size])
        at += size
