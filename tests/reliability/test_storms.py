"""Storms of server errors: requests succeed elsewhere; the failing replica's circuit opens."""

from __future__ import annotations

import asyncio
import socket

import aiohttp

from proxy.app import PROXY
from proxy.dataplane.headers import REPLICA_HEADER
from tests.support.calls import completion, metric_value, metrics_text, post
from tests.support.fleet import run_stack
from tests.support.freeze import BACKLOG
from tests.support.waiting import wait_for


async def test_5xx_storm_fails_over_and_opens_the_circuit() -> None:
    sims = [{"faults": {"fail_status": 503}}, {}]
    async with run_stack(
        sims=sims, policy="least_loaded", breaker_failures=3, breaker_cooldown=60
    ) as stack:
        bad = stack.sims[0]
        results = await asyncio.gather(
            *(post(stack, "/v1/completions", completion()) for _ in range(30))
        )
        assert [status for status, _, _ in results] == [200] * 30
        assert all(headers[REPLICA_HEADER] != bad.id for _, _, headers in results)
        await wait_for(lambda: len(stack.pool.routable()) == 1, what="circuit open")
        async with stack.session.get(stack.proxy_url + "/metrics") as resp:
            text = await resp.text()
        assert metric_value(text, 'rollout_proxy_ejections_total{cause="circuit"}') == 1

        # Its /health is fine, but the circuit stays open for the cool-down: more good probes
        # than readmission takes (2) change nothing.
        def probes() -> int:
            return sum(record.path == "/health" for record in bad.state.records)

        seen = probes()
        await wait_for(lambda: probes() >= seen + 4, timeout=10.0, what="four more probes")
        assert len(stack.pool.routable()) == 1


async def test_5xx_from_every_replica_reaches_the_client_as_the_replicas_answer() -> None:
    sims = [{"faults": {"fail_status": 500}}, {"faults": {"fail_status": 500}}]
    async with run_stack(sims=sims, breaker_failures=100) as stack:
        status, body, _ = await post(stack, "/v1/completions", completion())
        assert status == 500
        assert b"Simulated failure" in body


async def test_slow_connects_fail_over_and_eject_nobody() -> None:
    """Connects that time out are load, not death (issue 48): each request goes to the other
    replica (all answered, no attempt spent on a timeout) and no request's failure ejects the
    slow replica; it is counted (``replica_errors_total{kind="connect_timeout"}``), and its
    health probes judge it. Before, the first connect timeout ejected its replica (and in a
    burst the whole fleet)."""
    async with run_stack(
        2,
        relays=True,
        policy="least_loaded",
        connect_timeout=0.5,
        request_timeout=20,  # a connection that got through anyway fails clearly, not hangs
        max_inflight_per_replica=64,
        health_interval=60.0,  # one probe round: only the requests meet the slow replica
    ) as stack:
        await stack.relays[0].stall()
        blockers = await asyncio.to_thread(fill_backlog, stack.relays[0].url)
        try:
            # More at once than the pool holds idle connections: new connects are needed, and
            # those to the stalled replica hang in the handshake until the connect timeout.
            results = await asyncio.gather(
                *(post(stack, "/v1/completions", completion()) for _ in range(12))
            )
            assert [status for status, _, _ in results] == [200] * 12
            async with stack.session.get(stack.proxy_url + "/metrics") as resp:
                text = await resp.text()
            slow = stack.relays[0].url.removeprefix("http://")
            kind = f'rollout_proxy_replica_errors_total{{kind="connect_timeout",replica="{slow}"}}'
            assert metric_value(text, kind) >= 1
            assert not [line for line in text.splitlines()
                        if line.startswith("rollout_proxy_ejections_total{cause=")
                        and not line.endswith(" 0.0") and 'cause="probe"' not in line]  # fmt: skip
        finally:
            for sock in blockers:
                sock.close()


def fill_backlog(url: str) -> list[socket.socket]:
    """Connect until a handshake no longer completes: the listener's backlog is full."""
    host, port = url.removeprefix("http://").split(":")
    blockers = []
    for _ in range(BACKLOG + 8):
        sock = socket.socket()
        sock.settimeout(0.2)
        blockers.append(sock)
        try:
            sock.connect((host, int(port)))
        except TimeoutError:
            return blockers
    raise AssertionError("the stalled relay kept completing handshakes")


BURST = 160  # streamed completions at once: 40 per replica, five times the accept queue
STALL_S = 1.5  # the replicas accept nothing this long: three connect timeouts


async def test_a_burst_of_new_connections_queues_at_the_proxy_and_ejects_nobody() -> None:
    """A first wave, scaled down: four replicas whose accept queues hold 8 connections
    (``BACKLOG``) accept nothing for 1.5 s while 160 streamed completions arrive (connect
    timeout 0.5 s). The proxy opens at most 4 connections to a replica at once
    (``--max-connects-per-replica``): the rest of the burst waits at the proxy for them, and
    every stream completes with no replica ejected. Fails on a pool that connects per request
    at once and a forwarder that ejects at the first connect timeout (issue 48: every replica
    ejected within a second, most requests failed)."""
    async with run_stack(
        4, relays=True, connect_timeout=0.5, max_connects_per_replica=4,
        max_inflight_per_replica=64, request_timeout=60,
        health_interval=60.0,  # one probe round: tests' fast probes would fill the backlog too
    ) as stack:  # fmt: skip
        for link in stack.relays:
            await link.stall()
        limiter = stack.proxy_app[PROXY].dataplane.limiter

        # A client of its own: one connection per request (a session's default pool holds 100)
        session = await stack.exits.enter_async_context(
            aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))
        )

        async def one(n: int) -> tuple[int, bytes]:
            body = completion(prompt=[n % 97 + 1] * 24, stream=True)
            async with session.post(stack.proxy_url + "/v1/completions", json=body) as r:
                return r.status, await r.read()

        burst = [asyncio.create_task(one(n)) for n in range(BURST)]
        await wait_for(lambda: limiter.inflight == BURST, what="the burst on its way upstream")
        # Kept: the stall's length on the real clock is the scenario (past the connect timeout).
        await asyncio.sleep(STALL_S)
        for link in stack.relays:
            link.unstall()
        answers = await asyncio.gather(*burst)
        assert [status for status, _ in answers] == [200] * BURST
        assert all(body.rstrip().endswith(b"data: [DONE]") for _, body in answers)
        text = await metrics_text(stack)
        ejected = [line for line in text.splitlines()
                   if line.startswith("rollout_proxy_ejections_total{")
                   and not line.endswith(" 0.0")]  # fmt: skip
        assert not ejected, ejected
        assert len(stack.pool.routable()) == 4
