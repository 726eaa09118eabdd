"""The one client for replica traffic: control calls on the connection pool's own lane, against
real servers on loopback (an aiohttp app as the replica, or ``tests.support.scripted`` where the
bytes matter): what goes out, what comes back, a streamed PUT at the pace its reader takes it,
and an ejection's ``drop`` that fails the data path's answers but never a control call."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import pytest
import uvloop
from aiohttp import web

from proxy.config import UpstreamSettings
from proxy.upstream.client import Reply, UpstreamClient
from proxy.upstream.connpool import CONTROL_ANSWER_LIMIT, Streamed
from proxy.upstream.errors import AnswerTooLong, Dropped
from tests.support.scripted import ok, scripted
from tests.support.servers import serve
from tests.support.waiting import wait_for

MIB = 1 << 20


@dataclass(frozen=True)
class Target:
    url: str


def client(**settings: Any) -> UpstreamClient:
    return UpstreamClient(UpstreamSettings.model_validate(settings))


async def test_a_control_call_carries_the_token_prefix_and_host_and_reuses_its_connection() -> None:
    seen: list[tuple[str, str, str | None, str | None, str, bytes]] = []

    async def echo(request: web.Request) -> web.Response:
        body = await request.read()
        headers = request.headers
        seen.append((request.method, request.path_qs, headers.get("Authorization"),
                     headers.get("Content-Type"), request.host, body))  # fmt: skip
        return web.json_response({"n": len(seen)}, status=201)

    app = web.Application()
    app.router.add_route("*", "/prefix/{tail:.*}", echo)
    async with serve(app) as url:
        upstream = client(upstream_token="t0k")
        try:
            target = Target(url + "/prefix/")
            reply = await upstream.call(target, "POST", "/v1/load_lora_adapter", body=b'{"a":1}')
            assert reply == Reply(201, b'{"n": 1}', "application/json; charset=utf-8")
            assert (await upstream.call(target, "GET", "/server_info?config_format=json")).json()
        finally:
            await upstream.close()
    host = url.removeprefix("http://")
    assert seen == [
        ("POST", "/prefix/v1/load_lora_adapter", "Bearer t0k", "application/json", host,
         b'{"a":1}'),
        ("GET", "/prefix/server_info?config_format=json", "Bearer t0k", None, host, b""),
    ]  # fmt: skip
    assert upstream.pool.opened == 1  # the second call went out on the first one's connection


async def test_control_calls_and_the_data_path_never_share_a_connection() -> None:
    async with scripted(lambda n: [ok(b"n%d" % n)]) as server:
        upstream = client()
        try:
            target = Target(server.url)
            assert (await upstream.call(target, "POST", "/reset_prefix_cache")).body == b"n1"
            async with upstream.pool.request(server.url, "POST", "/v1/completions", b"{}",
                                             "application/json") as answer:  # fmt: skip
                assert await answer.read() == b"n2"
            assert (await upstream.call(target, "GET", "/v1/models")).body == b"n3"
            assert upstream.pool.idle == 2
        finally:
            await upstream.close()
    assert server.connections == upstream.pool.opened == 2
    heads = [request.split(b"\r\n\r\n")[0].split(b"\r\n") for request in server.requests]
    assert heads[0][0] == b"POST /reset_prefix_cache HTTP/1.1"
    assert b"Content-Length: 0" in heads[0]  # a bodiless POST says so
    assert heads[2][0] == b"GET /v1/models HTTP/1.1"
    assert not [line for line in heads[2] if line.startswith(b"Content-")]


async def test_an_ejection_fails_the_data_answer_still_due_but_not_a_control_call() -> None:
    gate = asyncio.Event()
    arrived: list[str] = []

    async def held(request: web.Request) -> web.Response:
        arrived.append(request.path)
        await gate.wait()
        return web.json_response({"path": request.path})

    app = web.Application()
    app.router.add_post("/{name:.*}", held)
    async with serve(app) as url:
        upstream = client()

        async def generate() -> bytes:
            async with upstream.pool.request(url, "POST", "/v1/completions", b"{}",
                                             "application/json") as answer:  # fmt: skip
                return await answer.read()

        try:
            data = asyncio.create_task(generate())
            control = asyncio.create_task(
                upstream.call(Target(url), "POST", "/v1/load_lora_adapter", body=b"{}")
            )
            await wait_for(lambda: len(arrived) == 2, what="both requests at the replica")
            assert upstream.pool.drop(url, "ejected") == 1  # the data lane's one connection
            with pytest.raises(Dropped, match="ejected"):
                await asyncio.wait_for(data, 5)
            assert not control.done()
            gate.set()
            reply = await asyncio.wait_for(control, 5)
            assert (reply.status, reply.json()) == (200, {"path": "/v1/load_lora_adapter"})
            # And a control call made after the ejection is not refused for it either.
            assert (await upstream.call(Target(url), "POST", "/health")).status == 200
        finally:
            await upstream.close()


@contextmanager
def slow_reader() -> Iterator[socket.socket]:
    """A listening socket whose connections have a small, fixed receive buffer (no autotuning),
    so what the kernel holds between the proxy and the reader is bounded and small."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 256 * 1024)
        sock.bind(("127.0.0.1", 0))
        sock.listen(8)
        yield sock


async def _paced_put(total: int) -> tuple[int, bytes, int]:
    """PUT ``total`` bytes in 1 MiB pieces to a server that reads 64 KiB per turn of the loop;
    the most bytes the body had yielded beyond what the server had read, its head, and what it
    read in all."""
    piece = b"\1" * MIB
    yielded = received = lead = 0
    heads: list[bytes] = []

    async def body() -> AsyncIterator[bytes]:
        nonlocal yielded
        for _ in range(total // MIB):
            yielded += len(piece)
            yield piece

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal received, lead
        try:
            heads.append(await reader.readuntil(b"\r\n\r\n"))
            while received < total:
                lead = max(lead, yielded - received)
                data = await reader.read(64 * 1024)
                if not data:
                    break
                received += len(data)
                await asyncio.sleep(0)  # one turn of the loop: the sender gets its chance to run
            writer.write(ok(b'{"stored": true}'))
            await writer.drain()
            await reader.read()  # until the client closes (it does not reuse an upload's)
        except ConnectionError:
            pass
        finally:
            writer.close()

    with slow_reader() as sock:
        server = await asyncio.start_server(handle, sock=sock)
        url = f"http://127.0.0.1:{sock.getsockname()[1]}"
        upstream = client()
        try:
            body_of = Streamed(body(), total, "application/x-adapter")
            reply = await upstream.call(Target(url), "PUT", "/adapters/v1", body=body_of)
            assert reply == Reply(200, b'{"stored": true}', "application/json")
        finally:
            await upstream.close()
            server.close()
            await server.wait_closed()
    return lead, heads[0], received


@pytest.mark.parametrize("runner", [asyncio.run, uvloop.run], ids=["asyncio", "uvloop"])
def test_a_streamed_put_goes_out_at_the_pace_its_reader_takes_it(
    runner: Callable[[Coroutine[Any, Any, Any]], Any],
) -> None:
    """64 MiB through a reader that takes it slowly: the body is never far ahead of the reader
    (the kernel's buffers, one transport buffer and one piece), never the whole body."""
    total = 64 * MIB
    lead, head, received = runner(_paced_put(total))
    assert received == total
    lines = head.split(b"\r\n")
    assert lines[0] == b"PUT /adapters/v1 HTTP/1.1"
    assert b"Content-Length: %d" % total in lines
    assert b"Content-Type: application/x-adapter" in lines
    assert not [line for line in lines if line.lower().startswith(b"transfer-encoding")]
    assert lead < 12 * MIB, f"the body ran {lead / MIB:.1f} MiB ahead of its reader"


class Unreadable(Exception):
    pass


async def test_an_exception_of_the_body_passes_through_and_closes_the_connection() -> None:
    async def body() -> AsyncIterator[bytes]:
        yield b"x" * 10
        raise Unreadable("the file changed")

    async with scripted(lambda n: [ok(b"never")]) as server:
        upstream = client()
        try:
            body_of = Streamed(body(), 100, "x/y")
            with pytest.raises(Unreadable, match="the file changed"):
                await upstream.call(Target(server.url), "PUT", "/a", body=body_of)
            await wait_for(lambda: server.closed_by_client == 1, what="the server sees the close")
            assert upstream.pool.idle == 0
        finally:
            await upstream.close()


async def test_a_refusal_before_the_body_is_read_ends_the_sending() -> None:
    yielded = 0

    async def body() -> AsyncIterator[bytes]:
        nonlocal yielded
        while True:
            yielded += MIB
            yield b"\0" * MIB

    refusal = b"HTTP/1.1 413 Payload Too Large\r\nContent-Length: 9\r\n\r\ntoo large"

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await reader.readuntil(b"\r\n\r\n")
            writer.write(refusal)
            await writer.drain()
            while await reader.read(1 << 16):  # a lingering close: the rest of the body dropped
                pass
        except ConnectionError:
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    upstream = client()
    try:
        body_of = Streamed(body(), 1 << 40, "x/y")  # a terabyte announced, never all sent
        reply = await upstream.call(Target(url), "PUT", "/adapters/big", body=body_of)
        assert (reply.status, reply.body) == (413, b"too large")
        assert yielded < 1 << 40 and upstream.pool.idle == 0
    finally:
        await upstream.close()
        server.close()
        await server.wait_closed()


async def test_a_content_length_above_the_cap_is_refused_before_it_is_read() -> None:
    head = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % (CONTROL_ANSWER_LIMIT + 1)
    async with scripted(lambda n: [head]) as server:
        upstream = client()
        try:
            with pytest.raises(AnswerTooLong, match="above the limit"):
                await upstream.call(Target(server.url), "GET", "/metrics")
        finally:
            await upstream.close()


async def test_a_chunked_answer_longer_than_the_cap_is_cut_off() -> None:
    piece = b"m" * MIB
    chunk = b"%x\r\n%s\r\n" % (len(piece), piece)
    head = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
    pieces = CONTROL_ANSWER_LIMIT // MIB
    async with scripted(
        lambda n: [head, *[chunk] * (pieces if n == 1 else pieces + 1), b"0\r\n\r\n"]
    ) as server:
        upstream = client()
        try:
            reply = await upstream.call(Target(server.url), "GET", "/metrics")  # at the cap
            assert len(reply.body) == CONTROL_ANSWER_LIMIT
            with pytest.raises(AnswerTooLong, match="longer than"):
                await upstream.call(Target(server.url), "GET", "/metrics")
        finally:
            await upstream.close()
