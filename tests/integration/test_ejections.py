"""One way to eject: every cause is counted in rollout_proxy_ejections_total{cause} and resets
the good-probe streak, so ``--readmit-after`` good probes are needed to come back; a drained
replica says ``draining`` on every status page."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from proxy.fleet.replica import Health, Replica
from tests.support.adapters import write_adapter
from tests.support.calls import completion, load, load_body, metric_value, metrics_text, post
from tests.support.fleet import Stack, run_stack
from tests.support.waiting import wait_for

# The first probe round admits every replica; the next is a minute away, so only the cause
# under test can eject during the test.
ONE_ROUND: dict[str, Any] = {"health_interval": 60.0}
ADMIN = {"Authorization": "Bearer admin-secret"}


async def _ejections(stack: Stack, cause: str) -> float:
    return metric_value(
        await metrics_text(stack), f'rollout_proxy_ejections_total{{cause="{cause}"}}'
    )


def _replica(stack: Stack, index: int) -> Replica:
    replica = stack.pool.get(stack.sims[index].id)
    assert replica is not None
    return replica


async def _assert_ejected(stack: Stack, index: int, cause: str) -> None:
    replica = _replica(stack, index)
    await wait_for(lambda: replica.health is Health.EJECTED, what=f"{cause} ejection")
    assert replica.standing.ok_streak == 0, "an ejection must reset the good-probe streak"
    assert await _ejections(stack, cause) == 1


async def test_every_cause_is_exported_from_the_start() -> None:
    async with run_stack(1) as stack:
        for cause in ("probe", "transport", "midstream", "circuit"):
            assert await _ejections(stack, cause) == 0
        for cause in ("fanout", "broadcast"):
            assert await _ejections(stack, cause) == 0


async def test_probe_ejection_is_counted() -> None:
    async with run_stack(2) as stack:
        sick = stack.sims[1]
        await wait_for(lambda: _replica(stack, 1).standing.ok_streak >= 2, what="good probes")
        async with stack.session.post(sick.url + "/sim/faults", json={"unhealthy": True}) as r:
            assert r.status == 200
        await _assert_ejected(stack, 1, "probe")


async def test_fanout_ejection_is_counted_and_resets_the_streak() -> None:
    async with run_stack(2, forward_pause=True, **ONE_ROUND) as stack:
        assert _replica(stack, 1).standing.ok_streak == 1
        await stack.sims[1].stop()
        status, _, _ = await post(stack, "/pause?mode=keep", None)
        assert status == 200
        await _assert_ejected(stack, 1, "fanout")


async def test_broadcast_ejection_is_counted_and_resets_the_streak(tmp_path: Path) -> None:
    async with run_stack(2, **ONE_ROUND) as stack:
        assert _replica(stack, 1).standing.ok_streak == 1
        await stack.sims[1].stop()
        path = write_adapter(tmp_path, "trl-policy-v1")
        status, _, _ = await load(stack, load_body("trl-policy-v1", path))
        assert status == 200  # loaded on the one replica left; the other gets it when back
        await _assert_ejected(stack, 1, "broadcast")


async def test_forward_ejection_is_counted_and_resets_the_streak() -> None:
    """A request's failed connection is load, not death: the request fails over and the replica
    is ejected only at ``--gateway-failures`` in a row (here 3)."""
    async with run_stack(2, policy="least_loaded", gateway_failures=3, **ONE_ROUND) as stack:
        assert _replica(stack, 0).standing.ok_streak == 1
        await stack.sims[0].stop()  # least-loaded ties go to the first replica
        for sent in range(1, 4):
            status, _, _ = await post(stack, "/v1/completions", completion())
            assert status == 200  # failed over to the other replica
            assert _replica(stack, 0).gateway_streak == (sent if sent < 3 else 0)
            assert (_replica(stack, 0).health is Health.EJECTED) is (sent == 3)
        await _assert_ejected(stack, 0, "transport")


async def test_request_failures_eject_no_more_than_the_bound_and_the_rest_stay_on_probation(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """``--max-ejection-percent``: of 3 replicas, 34 % is one. Two go down; request failures
    eject the first, the second is spared (said once), stays in routing on probation, and every
    request is answered by the third."""
    caplog.set_level(logging.WARNING, logger="proxy.fleet")
    async with run_stack(3, policy="least_loaded", gateway_failures=1, max_ejection_percent=34,
                         **ONE_ROUND) as stack:  # fmt: skip
        await stack.sims[0].stop()  # least-loaded ties go to the first replica, then the second
        await stack.sims[1].stop()
        for _ in range(4):
            status, _, _ = await post(stack, "/v1/completions", completion())
            assert status == 200
        assert _replica(stack, 0).health is Health.EJECTED
        spared = _replica(stack, 1)
        assert spared.health is Health.HEALTHY and spared.gateway_streak >= 1
        assert await _ejections(stack, "transport") == 1
    said = [r.getMessage() for r in caplog.records if "not ejected" in r.getMessage()]
    assert len(said) == 1 and said[0].startswith(f"replica {spared.id} not ejected"), said


async def _status_states(stack: Stack, rid: str) -> dict[str, Any]:
    session, base = stack.session, stack.proxy_url
    async with session.get(base + "/health") as resp:
        health = (await resp.json())["down"][rid]["state"]
    async with session.get(base + "/proxy/status") as resp:
        status = next(r for r in (await resp.json())["replicas"] if r["id"] == rid)
    async with session.get(base + "/admin/replicas", headers=ADMIN) as resp:
        admin = next(r for r in await resp.json() if r["id"] == rid)
    return {"health": health, "status": status["state"], "admin": admin["state"]}


async def test_a_drained_replica_says_draining_everywhere() -> None:
    async with run_stack(2, admin_key="admin-secret") as stack:
        rid = stack.sims[0].id
        url = f"{stack.proxy_url}/admin/replicas/{rid}/drain"
        async with stack.session.post(url, headers=ADMIN) as resp:
            assert resp.status == 200
            assert (await resp.json())["state"] == "draining"
        states = await _status_states(stack, rid)
        assert states == {"health": "draining", "status": "draining", "admin": "draining"}
