"""Each way a control call fails, as the one error tree says it where the bytes entered and as
``reasons.failure_reason`` shows it (the words of ``/health``, ``/proxy/status`` and the log),
against real sockets on loopback: a closed port, a name that never resolves, a certificate
nobody vouches for, TLS to a plain port, a connect that never completes, silence, a close."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from proxy.config import UpstreamSettings
from proxy.upstream.client import UpstreamClient
from proxy.upstream.errors import (
    AnswerTimeout,
    ConnectError,
    ConnectTimeout,
    Disconnected,
    UpstreamError,
)
from proxy.upstream.reasons import failure_reason
from tests.support.certs import server_context
from tests.support.scripted import scripted
from tests.support.servers import free_port, serve


@dataclass(frozen=True)
class Target:
    url: str


async def failure(url: str, timeout_s: float = 5.0, **settings: Any) -> UpstreamError:
    """The error a GET /health to ``url`` raises (the test fails if it answers)."""
    upstream = UpstreamClient(UpstreamSettings.model_validate(settings))
    try:
        with pytest.raises(UpstreamError) as caught:
            await upstream.call(Target(url), "GET", "/health", timeout_s=timeout_s)
    finally:
        await upstream.close()
    return caught.value


def health_app() -> web.Application:
    async def health(request: web.Request) -> web.Response:
        return web.Response(text="ok")

    app = web.Application()
    app.router.add_get("/health", health)
    return app


async def test_a_closed_port_is_connection_refused() -> None:
    exc = await failure(f"http://127.0.0.1:{free_port()}")
    assert type(exc) is ConnectError
    assert failure_reason(exc, 5.0) == "connection refused"
    assert str(exc).startswith("cannot connect to http://127.0.0.1:")


async def test_a_name_that_never_resolves_is_said_with_the_name() -> None:
    exc = await failure("http://replica.invalid:8000")  # RFC 6761: never resolves
    assert type(exc) is ConnectError
    assert failure_reason(exc, 5.0) == "DNS name not found (replica.invalid)"


async def test_a_certificate_nobody_vouches_for_is_not_accepted_and_a_bundle_fixes_it(
    tmp_path: Path,
) -> None:
    context, cert = server_context(tmp_path)
    async with serve(health_app(), ssl_context=context) as url:
        exc = await failure(url)
        assert type(exc) is ConnectError
        reason = failure_reason(exc, 5.0)
        assert reason.startswith("TLS certificate not accepted (") and "self" in reason, reason
        upstream = UpstreamClient(UpstreamSettings.model_validate({"ca_bundle": str(cert)}))
        try:
            reply = await upstream.call(Target(url), "GET", "/health")
        finally:
            await upstream.close()
        assert (reply.status, reply.body) == (200, b"ok")


async def test_tls_to_a_plain_port_is_a_handshake_failure() -> None:
    async with serve(health_app()) as url:
        exc = await failure(url.replace("http://", "https://"))
    assert type(exc) is ConnectError
    assert failure_reason(exc, 5.0).startswith("TLS handshake failed ("), exc.summary


@contextmanager
def full_backlog() -> Iterator[str]:
    """A port whose accept queue is full (``listen(0)`` and one connection nobody accepts):
    the kernel drops further SYNs, so a connect there never completes."""
    with socket.socket() as listener, socket.socket() as first:
        listener.bind(("127.0.0.1", 0))
        listener.listen(0)
        first.connect(listener.getsockname())
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"


async def test_a_connect_that_never_completes_times_out() -> None:
    with full_backlog() as url:
        exc = await failure(url, timeout_s=0.3)
    assert type(exc) is ConnectTimeout
    assert failure_reason(exc, 0.3) == "timed out after 0.3 s"


async def test_a_replica_that_never_answers_timed_out() -> None:
    async with scripted(lambda n: [b"HTTP/1.1 200 OK\r\n"]) as server:  # a head begun, no more
        exc = await failure(server.url, timeout_s=0.2)
    assert type(exc) is AnswerTimeout and isinstance(exc, TimeoutError)
    assert failure_reason(exc, 0.2) == "timed out after 0.2 s"


async def test_a_close_before_answering_and_an_answer_cut_short() -> None:
    async with scripted(lambda n: [], drop=frozenset({1})) as server:
        exc = await failure(server.url)
    assert type(exc) is Disconnected
    assert failure_reason(exc, 5.0) == "disconnected before answering"
    cut = b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nonly part"
    async with scripted(lambda n: [cut], close_after=1) as server:
        exc = await failure(server.url)
    assert type(exc) is Disconnected
    assert failure_reason(exc, 5.0) == "answer cut short"
