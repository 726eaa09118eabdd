"""Broken or hostile replicas: whatever bytes a replica answers with, the client gets a clear
answer quickly, nothing the replica sent leaks unscrubbed, and a connection whose framing is in
doubt is never reused. Each replica here is a raw server answering crafted bytes."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import orjson
import pytest

from tests.support.calls import completion, metric_value, metrics_text, post
from tests.support.fleet import Stack, run_stack
from tests.support.scripted import MODEL, ok, scripted

TOKEN = b"hf_leakedtokenvalue0123456789"
QUICK_S = 10.0  # a generous bound for "at once" on a busy machine; the timeout is far longer
SETTINGS: dict[str, Any] = {"request_timeout": 60.0, "max_attempts": 1, "max_answer_bytes": 1 << 20}


async def ask(stack: Stack) -> tuple[int, bytes, float]:
    started = time.monotonic()
    status, body, _ = await post(stack, "/v1/completions", completion(model=MODEL))
    return status, body, time.monotonic() - started


@pytest.mark.parametrize(
    "answer",
    [
        pytest.param(
            b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\nok",
            id="length-and-chunked",
        ),
        pytest.param(
            b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\nok",
            id="duplicate-length",
        ),
        pytest.param(
            "HTTP/1.1 200 OK\r\nContent-Length: ²\r\n\r\nok".encode(), id="superscript-length"
        ),
        pytest.param(
            b"HTTP/1.1 200 OK\r\nContent-Length: " + b"9" * 4300 + b"\r\n\r\n", id="huge-length"
        ),
        pytest.param(b"HTTP/1.1 2000 OK\r\nContent-Length: 2\r\n\r\nok", id="status-2000"),
        pytest.param(b"HTTP/1.1 099 OK\r\nContent-Length: 2\r\n\r\nok", id="status-099"),
        pytest.param(b"HTTP/1.1 200 OK\r\nX: a\x00b\r\nContent-Length: 2\r\n\r\nok", id="nul"),
        pytest.param(b"HTTP/1.1 200 OK\nContent-Length: 2\n\nok", id="bare-lf"),
        pytest.param(
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n"
            + b"X-Trailer: "
            + b"t" * 100_000
            + b"\r\n\r\n",
            id="huge-trailer",
        ),
        pytest.param(b"HTTP/1.1 200 OK\r\nContent-Length: 2000000\r\n\r\n", id="too-long"),
        pytest.param(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: h2c\r\n\r\n", id="upgrade"),
    ],
)
async def test_a_malformed_answer_is_a_quick_clear_502(answer: bytes) -> None:
    async with (
        scripted(lambda n: [answer], replica=True) as replica,
        run_stack(0, extra=(replica.url,), **SETTINGS) as stack,
    ):
        status, body, took = await ask(stack)
        assert status == 502, body
        assert took < QUICK_S
        message = orjson.loads(body)["error"]["message"]
        assert "no replica could answer" in message


async def test_a_replicas_bytes_are_never_echoed_unscrubbed() -> None:
    # The malformed line itself carries the token (a parser that quotes it would leak it).
    leak = b"HTTP/1.1 200 OK\r\nAuthorization Bearer " + TOKEN + b"\r\n\r\n"
    async with (
        scripted(lambda n: [leak], replica=True) as replica,
        run_stack(0, extra=(replica.url,), **SETTINGS) as stack,
    ):
        status, body, _ = await ask(stack)
        assert status == 502
        assert TOKEN not in body


async def test_an_interim_answer_is_skipped_and_costs_no_ejection() -> None:
    hints = b"HTTP/1.1 103 Early Hints\r\nLink: </x>; rel=preload\r\n\r\n"
    async with (
        scripted(lambda n: [hints, ok(b'{"choices": []}')], replica=True) as replica,
        run_stack(0, extra=(replica.url,), **SETTINGS) as stack,
    ):
        status, body, _ = await ask(stack)
        assert (status, body) == (200, b'{"choices": []}')
        text = await metrics_text(stack)
        assert metric_value(text, 'rollout_proxy_ejections_total{cause="transport"}') == 0
        assert len(stack.pool.routable()) == 1


async def test_keep_alive_close_in_one_header_is_honoured() -> None:
    close = b"HTTP/1.1 200 OK\r\nConnection: keep-alive, close\r\nContent-Length: 2\r\n\r\nok"
    async with (
        scripted(lambda n: [close], replica=True) as replica,
        run_stack(0, extra=(replica.url,), **SETTINGS) as stack,
    ):
        before = replica.connections
        for _ in range(3):
            status, _, _ = await ask(stack)
            assert status == 200
        assert replica.connections - before == 3  # a new connection for each request


async def test_a_silent_head_line_does_not_hang_until_the_timeout() -> None:
    half = b"HTTP/1.1 200 OK\nContent-Length: 2\n"  # bare LF and never a blank line
    async with (
        scripted(lambda n: [half], replica=True) as replica,
        run_stack(0, extra=(replica.url,), **SETTINGS) as stack,
    ):
        status, _, took = await asyncio.wait_for(ask(stack), QUICK_S * 2)
        assert status == 502 and took < QUICK_S
