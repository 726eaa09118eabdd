"""Storms of server errors: requests succeed elsewhere; the failing replica's circuit opens."""

from __future__ import annotations

import asyncio
import socket

from proxy.dataplane.headers import REPLICA_HEADER
from tests.support.calls import completion, metric_value, post
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


async def test_slow_connects_fail_over_and_eject() -> None:
    async with run_stack(
        2,
        relays=True,
        policy="least_loaded",
        connect_timeout=0.5,
        request_timeout=20,  # a connection that got through anyway fails clearly, not hangs
        max_inflight_per_replica=64,
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
            cause = 'rollout_proxy_ejections_total{cause="connect_timeout"}'
            assert metric_value(text, cause) >= 1
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
