"""Whoever holds the admin key may add replicas, and a replica gets the upstream token (in
``deploy``, the user's HF token): only allowlisted hosts may be added (issue: the proxy sent its
token to a loopback port and accepted link-local targets within 0.5 s). Real servers on
loopback."""

from __future__ import annotations

import pytest

from proxy.fleet.hosts import HostAllowlist
from tests.support.fleet import Stack, run_sim, run_stack
from tests.support.waiting import eventually

ADMIN = {"Authorization": "Bearer admin-secret"}


async def _add(stack: Stack, url: str) -> tuple[int, str]:
    async with stack.session.post(
        stack.proxy_url + "/admin/replicas", json={"url": url}, headers=ADMIN
    ) as response:
        return response.status, await response.text()


async def test_a_proxy_reachable_from_outside_adds_no_loopback_replica() -> None:
    # Listening on every interface (the sidecar in a job): its own machine's ports are off
    # limits; it is served on loopback here, its settings say 0.0.0.0.
    async with run_stack(1, admin_key="admin-secret", host="0.0.0.0") as stack, run_sim() as sim:
        status, text = await _add(stack, sim.url + "/x")
        assert status == 403 and "--replica-hosts" in text, text
        assert len(list(stack.pool)) == 1
        assert not await records_of(stack, sim.url + "")  # it was never sent a request


@pytest.mark.parametrize("target", ["http://169.254.169.254/latest", "http://10.0.0.7:8000"])
async def test_link_local_and_unlisted_hosts_are_refused(target: str) -> None:
    async with run_stack(1, admin_key="admin-secret") as stack:
        status, text = await _add(stack, target)
        assert status == 403, text
        assert "allowed: 127.*, ::1, localhost" in text


async def test_a_loopback_proxy_adds_loopback_replicas_and_the_flag_widens_the_list() -> None:
    async with run_stack(1, admin_key="admin-secret") as stack, run_sim() as sim:
        assert (await _add(stack, sim.url))[0] == 201

        async def probed() -> bool:
            return any(r["path"] == "/health" for r in await records_of(stack, sim.url))

        await eventually(probed, what="the added replica probed")
    async with (
        run_stack(1, admin_key="admin-secret", host="0.0.0.0", replica_hosts="127.0.0.*") as stack,
        run_sim() as sim,
    ):
        assert (await _add(stack, sim.url))[0] == 201


async def records_of(stack: Stack, url: str) -> list[dict[str, object]]:
    async with stack.session.get(url + "/sim/requests") as response:
        data = await response.json()
    return list(data["records"] if isinstance(data, dict) else data)


def test_the_default_allowlist_follows_the_configured_replicas() -> None:
    jobs = HostAllowlist.default(
        ["https://abc--8000.hf.jobs", "http://r1.gpu.example:8000", "http://10.1.2.3:8000"],
        discovering=False,
        listen_host="0.0.0.0",
    )
    assert jobs.patterns == ("*.hf.jobs", "*.gpu.example", "10.1.2.3")
    assert jobs.allows("https://def--8000.hf.jobs") and jobs.allows("http://r9.gpu.example")
    assert not jobs.allows("http://127.0.0.1:9") and not jobs.allows("http://10.1.2.4")
    assert not jobs.allows("http://evil.example/?.gpu.example")
    discovered = HostAllowlist.default([], discovering=True, listen_host="127.0.0.1")
    assert discovered.patterns == ("*.hf.jobs", "127.*", "::1", "localhost")
