"""Why a replica is not used, in words: logged once when it goes bad and when it comes back,
and the same reason in ``/health``, ``/proxy/status`` and ``top``."""

from __future__ import annotations

import logging
import socket
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from proxy.app import PROXY, build_app, serve
from proxy.config import Settings
from proxy.console.top import Reader
from proxy.console.view import plain
from proxy.fleet.replica import Replica
from tests.support.fleet import run_sim
from tests.support.servers import free_port
from tests.support.servers import serve as serve_replica
from tests.support.waiting import wait_for

PROBES = {"health_interval": 0.05, "health_timeout": 0.2}
FAILED_PROBES = 4  # enough repeats to show a reason is logged once, not once per probe
BOUND_S = 20.0


def failed_probes(replica: Replica) -> bool:
    return replica.standing.fail_streak >= FAILED_PROBES


@asynccontextmanager
async def proxy_for(url: str, **settings: Any) -> AsyncIterator[tuple[str, Replica]]:
    """A proxy in process in front of one replica ``url``: its URL and its view of the replica."""
    app = build_app(Settings.model_validate({"replicas": [url], **PROBES, **settings}))
    async with serve(app) as proxy_url:
        replica = next(iter(app[PROXY].fleet.pool))
        yield proxy_url, replica


@asynccontextmanager
async def answering(status: int) -> AsyncIterator[str]:
    """A replica whose /health answers ``status`` (an HF Jobs port without the token: 401)."""

    async def health(request: web.Request) -> web.Response:
        return web.Response(status=status)

    app = web.Application()
    app.router.add_get("/health", health)
    async with serve_replica(app) as url:
        yield url


@contextmanager
def silent() -> Iterator[str]:
    """A port that accepts connections (the kernel's backlog) and never answers."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(8)
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"


def warnings_about(caplog: pytest.LogCaptureFixture, replica: Replica) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.levelno == logging.WARNING and replica.id in r.getMessage()
    ]


async def reasons_shown(session: aiohttp.ClientSession, proxy_url: str, rid: str) -> list[str]:
    """The replica's reason as /health, /proxy/status and top show it."""
    async with session.get(proxy_url + "/health") as resp:
        health = (await resp.json())["down"][rid]["error"]
    async with session.get(proxy_url + "/proxy/status") as resp:
        status = await resp.json()
    snapshot = await Reader(proxy_url, None).read(session)
    (row,) = [line for line in plain(snapshot).splitlines() if rid in line]
    return [health, status["replicas"][0]["last_error"], row]


async def check_reason(
    caplog: pytest.LogCaptureFixture, url: str, reason: str, **settings: Any
) -> None:
    caplog.set_level(logging.INFO, logger="proxy")
    async with proxy_for(url, **settings) as (proxy_url, replica), aiohttp.ClientSession() as s:
        await wait_for(
            lambda: replica.standing.fail_streak >= FAILED_PROBES, BOUND_S, "failed probes"
        )
        health, status, row = await reasons_shown(s, proxy_url, replica.id)
        assert health == status == reason
        assert f"pending ({reason})" in row
        assert warnings_about(caplog, replica) == [f"replica {replica.id} not ready: {reason}"]


async def test_a_closed_port_is_connection_refused(caplog: pytest.LogCaptureFixture) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    await check_reason(caplog, url, "probe failed: connection refused")


async def test_a_401_says_to_check_the_token(caplog: pytest.LogCaptureFixture) -> None:
    async with answering(401) as url:
        await check_reason(caplog, url, "probe answered HTTP 401 (check --upstream-token)")


async def test_a_replica_that_never_answers_timed_out(caplog: pytest.LogCaptureFixture) -> None:
    with silent() as url:
        await check_reason(caplog, url, "probe failed: timed out after 0.2 s")


async def test_a_name_that_does_not_resolve(caplog: pytest.LogCaptureFixture) -> None:
    url = "http://replica.invalid:8000"  # RFC 6761: never resolves
    await check_reason(
        caplog,
        url,
        "probe failed: DNS name not found (replica.invalid)",
        replica_hosts="*.invalid",
    )


async def test_tls_to_a_plain_http_port_is_a_handshake_failure(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="proxy")
    async with answering(200) as url:
        tls_url = url.replace("http://", "https://")
        # A handshake refused takes a round trip or two; on a busy machine more than the 0.2 s
        # the other probes here are given, and its reason would read "timed out" instead.
        async with proxy_for(tls_url, health_timeout=5.0) as (_, replica):
            await wait_for(
                lambda: replica.standing.fail_streak >= FAILED_PROBES, BOUND_S, "failed probes"
            )
        assert replica.last_error.startswith("probe failed: TLS handshake failed ("), replica
        assert len(warnings_about(caplog, replica)) == 1


async def test_a_replica_that_comes_up_is_logged_admitted_with_what_it_was(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="proxy")
    port = free_port()
    async with proxy_for(f"http://127.0.0.1:{port}") as (_, replica):
        await wait_for(
            lambda: replica.standing.fail_streak >= FAILED_PROBES, BOUND_S, "failed probes"
        )
        async with run_sim(port=port):
            await wait_for(lambda: replica.routable, BOUND_S, "the replica admitted")
        admitted = [r for r in caplog.records if "admitted" in r.getMessage()]
        assert [(r.levelno, r.getMessage()) for r in admitted] == [
            (
                logging.INFO,
                f"replica {replica.id} admitted (was: probe failed: connection refused)",
            )
        ]
        assert replica.last_error == ""


async def test_a_healthy_replica_failing_probes_is_logged_going_bad_and_coming_back(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Not ejected (``eject_after`` is far off), so no admission line: its own two lines."""
    caplog.set_level(logging.INFO, logger="proxy")
    async with (
        run_sim() as sim,
        proxy_for(sim.url, eject_after=1000) as (_, replica),
        aiohttp.ClientSession() as session,
    ):
        await wait_for(lambda: replica.routable, BOUND_S, "the replica admitted")
        async with session.post(sim.url + "/sim/faults", json={"unhealthy": True}) as resp:
            assert resp.status == 200
        await wait_for(
            lambda: replica.standing.fail_streak >= FAILED_PROBES, BOUND_S, "failed probes"
        )
        async with session.post(sim.url + "/sim/faults", json={"unhealthy": False}) as resp:
            assert resp.status == 200
        await wait_for(lambda: replica.last_error == "", BOUND_S, "a good probe")
        assert replica.routable
    lines = [(r.levelno, r.getMessage()) for r in caplog.records if r.name == "proxy.health"]
    assert lines == [
        (logging.WARNING, f"replica {replica.id} failed a probe: probe answered HTTP 503"),
        (logging.INFO, f"replica {replica.id} answers its probes again"),
    ]
