"""Hostile or broken clients: no single request or connection can eject a replica, stop the
proxy's loops, hold the event loop, or take memory and file descriptors without bound."""

from __future__ import annotations

import asyncio
import contextlib
import io
import logging
import socket
import time
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import orjson
import pytest

from proxy.app import PROXY
from proxy.dataplane.headers import REPLICA_HEADER
from proxy.http.server import IDLE_YIELD_S
from tests.support.calls import completion, metric_value, metrics_text, post
from tests.support.clock import FakeClock
from tests.support.fleet import Stack, run_stack
from tests.support.refusals import raw_answer
from tests.support.waiting import eventually

QUICK_S = 5.0  # "at once", with room for a busy machine


@contextlib.asynccontextmanager
async def raw(stack: Stack) -> AsyncIterator[tuple[asyncio.StreamReader, asyncio.StreamWriter]]:
    host, port = stack.proxy_url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        yield reader, writer
    finally:
        writer.close()


async def status_figure(stack: Stack, field: str) -> int:
    """A figure of ``/proxy/status``."""
    async with stack.session.get(stack.proxy_url + "/proxy/status") as resp:
        return int((await resp.json())[field])


async def closed_within(reader: asyncio.StreamReader, seconds: float) -> bytes:
    """Everything the proxy sends until it closes the connection (fails if it does not)."""
    return await asyncio.wait_for(reader.read(), seconds)


async def ejections(stack: Stack) -> float:
    text = await metrics_text(stack)
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("rollout_proxy_ejections_total{")
    )


@pytest.mark.parametrize("path", ["/version", "/ping", "/get_world_size"])
async def test_head_is_answered_at_once_and_costs_no_replica(path: str) -> None:
    async with run_stack(2) as stack:
        async with stack.session.head(stack.sims[0].url + path) as direct:
            expected = direct.status  # the replica's own answer to HEAD (vLLM: 405 on /ping)
        for _ in range(3):
            started = time.monotonic()
            async with stack.session.head(stack.proxy_url + path) as resp:
                assert resp.status == expected
                assert resp.headers[REPLICA_HEADER]
                assert await resp.read() == b""
            assert time.monotonic() - started < QUICK_S
        assert len(stack.pool.routable()) == 2
        assert await ejections(stack) == 0
        status, _, _ = await post(stack, "/v1/completions", completion())
        assert status == 200


async def test_an_idle_connection_is_closed_after_the_keep_alive_timeout() -> None:
    async with run_stack(1, client_keepalive_timeout=0.3) as stack, raw(stack) as (reader, _):
        assert await closed_within(reader, QUICK_S) == b""


async def test_a_head_that_never_ends_is_closed_after_the_head_timeout() -> None:
    settings: dict[str, Any] = {"client_keepalive_timeout": 600.0, "client_head_timeout": 0.3}
    async with run_stack(1, **settings) as stack, raw(stack) as (reader, writer):
        writer.write(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n")  # and nothing more
        assert await closed_within(reader, QUICK_S) == b""
        assert len(stack.pool.routable()) == 1


async def test_a_body_that_never_arrives_is_answered_408() -> None:
    async with run_stack(1, client_body_timeout=0.3) as stack, raw(stack) as (reader, writer):
        writer.write(
            b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b'Content-Length: 100\r\n\r\n{"model":'
        )
        answer = await closed_within(reader, QUICK_S)
        assert answer.startswith(b"HTTP/1.1 408")
        assert b"--client-body-timeout" in answer


async def test_connections_beyond_the_cap_are_refused_and_the_cap_recovers() -> None:
    """The cap counts connections that have sent something (here a head begun, never ended)."""
    async with run_stack(1, max_client_connections=4) as stack:
        held = [await asyncio.open_connection(*stack.proxy_url[7:].split(":")) for _ in range(4)]
        for _, writer in held:
            writer.write(b"POST /v1/completions HTTP/1.1\r\n")
            await writer.drain()
        await eventually(lambda: _speaking(stack, 4), timeout=QUICK_S, what="4 counted")
        async with raw(stack) as (reader, writer):
            writer.write(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
            answer = await closed_within(reader, QUICK_S)
        assert answer.startswith(b"HTTP/1.1 503")
        assert b"too many client connections" in answer
        for _, writer in held:
            writer.close()
        await asyncio.gather(*(writer.wait_closed() for _, writer in held))

        async def served() -> bool:
            try:
                status, _, _ = await post(stack, "/v1/completions", completion())
            except aiohttp.ClientError:
                return False
            return status == 200

        await eventually(served, timeout=QUICK_S, what="the cap to recover")
        text = await metrics_text(stack)
        assert metric_value(text, 'rollout_proxy_rejections_total{reason="too_many_connections"}')


async def _speaking(stack: Stack, count: int) -> bool:
    return stack.proxy_app[PROXY].edge.guard.speaking == count


async def test_silent_connections_are_closed_at_the_head_timeout_and_lock_nobody_out() -> None:
    """More connections than the cap that never send a byte: others are served meanwhile, and
    each silent one is closed at the head timeout (not the keep-alive timeout)."""
    settings: dict[str, Any] = {
        "max_client_connections": 8,
        "client_head_timeout": 1.0,
        "client_keepalive_timeout": 600.0,
    }
    async with run_stack(1, **settings) as stack, contextlib.AsyncExitStack() as held:
        silent = [await held.enter_async_context(raw(stack)) for _ in range(10)]
        status, answer, _ = await post(stack, "/v1/completions", completion())
        assert status == 200, answer
        started = time.monotonic()
        closed = await asyncio.gather(*(closed_within(reader, QUICK_S) for reader, _ in silent))
        assert closed == [b""] * 10
        assert time.monotonic() - started < QUICK_S


async def test_a_declared_length_above_the_limit_is_refused_before_reading() -> None:
    async with run_stack(1) as stack, raw(stack) as (reader, writer):
        started = time.monotonic()
        writer.write(
            b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: 1000000000000\r\n\r\n{"
        )
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), QUICK_S)
        assert head.startswith(b"HTTP/1.1 413")
        assert time.monotonic() - started < QUICK_S


async def test_request_bodies_share_a_memory_budget_charged_by_bytes_received() -> None:
    settings: dict[str, Any] = {"max_body_bytes": 65536, "max_body_bytes_in_flight": 102400}
    async with run_stack(1, **settings) as stack, raw(stack) as (_reader, writer):
        # One body of 60 KiB held: all of it sent but its last byte ...
        writer.write(
            b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: 61440\r\n\r\n" + b" " * 61439
        )
        await writer.drain()

        async def reserved() -> bool:  # its handler holds what arrived, waiting on the rest
            return await status_figure(stack, "body_bytes_held") >= 61439

        await eventually(reserved, timeout=QUICK_S, what="the proxy to hold the body")
        # ... leaves no room for another one of 60 KiB.
        body = orjson.dumps(completion(padding="x" * 60_000))
        status, answer, _ = await post(stack, "/v1/completions", body)
        assert status == 503, answer
        assert b"--max-body-bytes-in-flight" in answer
        writer.close()
        small = await post(stack, "/v1/completions", completion())
        assert small[0] == 200


async def test_declared_lengths_alone_hold_nothing() -> None:
    """32 connections each declaring 32 MiB (the limit) and sending one byte: another client's
    completion is served (they were charged 1 GiB by their declarations before)."""
    settings: dict[str, Any] = {"max_body_bytes": 32 << 20, "max_body_bytes_in_flight": 1 << 30}
    async with run_stack(1, **settings) as stack, contextlib.AsyncExitStack() as held:
        for _ in range(32):
            _, writer = await held.enter_async_context(raw(stack))
            writer.write(
                b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
                b"\r\nContent-Length: 33554432\r\n\r\n{"
            )
            await writer.drain()

        async def all_waiting() -> bool:
            return await status_figure(stack, "body_bytes_held") == 32

        await eventually(all_waiting, timeout=QUICK_S, what="32 bodies begun")
        status, answer, _ = await post(stack, "/v1/completions", completion())
        assert status == 200, answer


@pytest.mark.parametrize(
    ("headers", "fragment"),
    [
        ({"Content-Type": "application/json\udcff\udcfe"}, b"Content-Type"),
        ({"X-Routing-Key": "key\udcff"}, b"X-Routing-Key"),
    ],
)
async def test_odd_header_values_are_a_400_never_a_500(
    headers: dict[str, str], fragment: bytes
) -> None:
    async with run_stack(1) as stack, raw(stack) as (reader, writer):
        body = orjson.dumps(completion())
        head = f"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n"
        extra = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
        writer.write(head.encode() + extra.encode("utf-8", "surrogateescape") + b"\r\n" + body)
        answer = await asyncio.wait_for(reader.readuntil(b"}}"), QUICK_S)
        assert answer.startswith(b"HTTP/1.1 400"), answer
        assert fragment in answer


async def test_a_non_ascii_request_target_is_a_400() -> None:
    async with run_stack(1) as stack, raw(stack) as (reader, writer):
        writer.write(b"GET /version?x=\xff HTTP/1.1\r\nHost: x\r\n\r\n")
        answer = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), QUICK_S)
        assert answer.split(b" ")[1] in (b"400",)


async def test_a_huge_batch_is_refused_and_never_holds_the_loop() -> None:
    prompt = b"[" + b",".join([b"[1]"] * 1_000_000) + b"]"
    body = b'{"model": "sim-model", "prompt": ' + prompt + b', "max_tokens": 1}'
    async with run_stack(1) as stack:

        async def send_big() -> tuple[int, bytes]:
            headers = {"Content-Type": "application/json"}
            url = stack.proxy_url + "/v1/completions"
            async with stack.session.post(url, data=io.BytesIO(body), headers=headers) as resp:
                return resp.status, await resp.read()

        big = asyncio.create_task(send_big())
        beats = 0
        while not big.done():  # /health keeps answering while the big body is handled
            started = time.monotonic()
            async with stack.session.get(stack.proxy_url + "/health") as resp:
                assert resp.status == 200
            assert time.monotonic() - started < 2.0
            beats += 1
        status, answer = await big
        assert status == 400
        assert b"--max-prompt-elements" in answer
        assert beats >= 1


async def test_bad_requests_are_logged_once_per_kind_without_traceback(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async with run_stack(1) as stack:
        caplog.set_level(logging.WARNING)
        for _ in range(20):
            async with raw(stack) as (reader, writer):
                writer.write(b"GET /version HTTP/1.1\r\nHost: x\r\nBad Header Line\r\n\r\n")
                await closed_within(reader, QUICK_S)
        reports = [r for r in caplog.records if "bad request from a client" in r.getMessage()]
        assert len(reports) == 1
        assert reports[0].levelno == logging.WARNING and reports[0].exc_info is None
        assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
        text = await metrics_text(stack)
        assert (
            metric_value(text, 'rollout_proxy_bad_client_requests_total{kind="bad_message"}') == 20
        )


async def test_a_client_that_stops_reading_is_disconnected_and_frees_its_slot() -> None:
    async with run_stack(1, client_send_timeout=0.5) as stack:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # fills at once
        host, port = stack.proxy_url.removeprefix("http://").split(":")
        sock.connect((host, int(port)))
        _, writer = await asyncio.open_connection(sock=sock)
        body = orjson.dumps(completion(max_tokens=4000, logprobs=5))
        head = b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        writer.write((head + b"Content-Length: %d\r\n\r\n" % len(body) + body) * 8)

        async def inflight() -> int:
            return await status_figure(stack, "inflight")

        async def answering() -> bool:  # the proxy is writing an answer nobody reads ...
            return await inflight() > 0

        deadline = time.monotonic() + QUICK_S * 4
        await eventually(answering, timeout=QUICK_S * 4, what="an answer in flight")
        free_since = None
        while free_since is None or time.monotonic() - free_since < 1.0:
            assert time.monotonic() < deadline, "a client that does not read holds its slot"
            if await inflight():
                free_since = None
            elif free_since is None:
                free_since = time.monotonic()  # ... until it gives up on that client for good
            # Kept: "free for a whole second" needs a second of real time to pass, sampled.
            await asyncio.sleep(0.05)
        writer.close()


async def test_an_admin_body_that_never_arrives_is_answered_408() -> None:
    """The admin API reads its body under ``--client-body-timeout`` too (it had no bound)."""
    async with (
        run_stack(1, client_body_timeout=0.3, admin_key="admin-k") as stack,
        raw(stack) as (reader, writer),
    ):
        writer.write(
            b"POST /admin/replicas HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer admin-k\r\n"
            b'Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{"url":'
        )
        answer = await closed_within(reader, QUICK_S)
        assert answer.startswith(b"HTTP/1.1 408")
        assert b"--client-body-timeout" in answer


async def _one_request(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """``GET /health`` on a kept-alive connection, its answer read whole."""
    writer.write(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), QUICK_S)
    length = next(
        int(line.split(b":", 1)[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length:")
    )
    await asyncio.wait_for(reader.readexactly(length), QUICK_S)


async def test_at_the_cap_an_idle_keep_alive_yields_to_a_new_client() -> None:
    """64 connections at a cap of 64, each kept alive after one ``GET /health``: once they have
    been idle for ``IDLE_YIELD_S`` (the proxy's clock, driven here), a new client's completion
    is answered at once and the oldest idle connection is closed in its place, so the cap still
    holds; before that, the new client is refused (a request may be on its way on a connection
    that only looks idle), and a connection in the middle of a request never yields. Fails on a
    guard that counts an idle keep-alive like a busy one (it locked new clients out for the
    keep-alive timeout: 74.5 s, 38 refusals in a row)."""
    clock = FakeClock()
    async with (
        run_stack(1, max_client_connections=64, clock=clock) as stack,
        contextlib.AsyncExitStack() as held,
    ):
        guard = stack.proxy_app[PROXY].edge.guard
        kept = [await held.enter_async_context(raw(stack)) for _ in range(64)]
        for reader, writer in kept:
            await _one_request(reader, writer)
        assert guard.speaking == 64
        status, body, _ = await raw_answer(stack, b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        assert status == 503, body  # idle for less than IDLE_YIELD_S: the cap holds
        busy_reader, busy = kept[1]
        busy.write(b"POST /v1/completions HTTP/1.1\r\n")  # a head begun: in use, never yields
        await eventually(lambda: _working(stack, 63), timeout=QUICK_S, what="the head counted")
        clock.advance(IDLE_YIELD_S)
        started = time.monotonic()
        status, body, _ = await post(stack, "/v1/completions", completion())
        took = time.monotonic() - started
        assert status == 200, body
        assert took < QUICK_S, took
        assert guard.speaking == 64 and guard.yielded == 1
        assert await closed_within(kept[0][0], QUICK_S) == b""  # the oldest idle one
        assert not busy_reader.at_eof()


async def _working(stack: Stack, idle: int) -> bool:
    return stack.proxy_app[PROXY].edge.guard.idle_connections == idle
