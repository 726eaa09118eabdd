"""Active health probes: eject and readmit; draining; the admin API."""

from __future__ import annotations

import asyncio

import orjson

from proxy.dataplane.headers import REPLICA_HEADER
from tests.support.calls import completion, post
from tests.support.fleet import run_sim, run_stack
from tests.support.waiting import wait_for

ADMIN = {"Authorization": "Bearer admin-secret"}


async def test_unhealthy_replica_is_ejected_then_readmitted() -> None:
    async with run_stack(2) as stack:
        sick = stack.sims[1]
        async with stack.session.post(sick.url + "/sim/faults", json={"unhealthy": True}) as r:
            assert r.status == 200
        await wait_for(lambda: len(stack.pool.routable()) == 1, what="ejection")
        async with stack.session.get(stack.proxy_url + "/health") as resp:
            assert resp.status == 200
            body = await resp.json()
        assert body["down"][sick.id]["state"] == "ejected"
        for _ in range(4):
            _, _, headers = await post(stack, "/v1/completions", completion())
            assert headers[REPLICA_HEADER] != sick.id
        async with stack.session.post(sick.url + "/sim/faults", json={"unhealthy": False}) as r:
            assert r.status == 200
        await wait_for(lambda: len(stack.pool.routable()) == 2, what="readmission")


async def test_health_is_503_when_no_replica_can_serve() -> None:
    async with run_stack(1) as stack:
        await stack.sims[0].stop()
        await wait_for(lambda: not stack.pool.routable(), what="ejection")
        async with stack.session.get(stack.proxy_url + "/health") as resp:
            assert resp.status == 503
            body = await resp.json()
        assert body["status"] == "unavailable"
        assert stack.sims[0].id in body["down"]


async def test_drain_finishes_in_flight_and_takes_no_new_work() -> None:
    async with run_stack(2, admin_key="admin-secret") as stack:
        # Hold one request on the replica that owns this prompt.
        _, _, first = await post(stack, "/v1/completions", completion())
        target = next(s for s in stack.sims if s.id == first[REPLICA_HEADER])
        async with stack.session.post(target.url + "/pause?mode=keep") as resp:
            assert resp.status == 200
        held = asyncio.create_task(post(stack, "/v1/completions", completion()))
        await wait_for(lambda: target.state.engine.in_flight == 1, what="request on the target")
        url = f"{stack.proxy_url}/admin/replicas/{target.id}/drain"
        async with stack.session.post(url, headers=ADMIN) as resp:
            assert resp.status == 200
            assert (await resp.json())["draining"] is True
        for _ in range(4):
            status, _, headers = await post(stack, "/v1/completions", completion())
            assert status == 200
            assert headers[REPLICA_HEADER] != target.id
        async with stack.session.post(target.url + "/resume") as resp:
            assert resp.status == 200
        status, _, headers = await held
        assert (status, headers[REPLICA_HEADER]) == (200, target.id)
        undrain = f"{stack.proxy_url}/admin/replicas/{target.id}/undrain"
        async with stack.session.post(undrain, headers=ADMIN) as resp:
            assert resp.status == 200
        assert len(stack.pool.routable()) == 2


async def test_admin_adds_and_removes_replicas() -> None:
    async with run_stack(1, admin_key="admin-secret") as stack, run_sim() as extra:
        admin = stack.proxy_url + "/admin/replicas"
        async with stack.session.post(admin, json={"url": extra.url}, headers=ADMIN) as resp:
            assert resp.status == 201
        await wait_for(lambda: len(stack.pool.routable()) == 2, what="new replica admitted")
        async with stack.session.post(admin, json={"url": "gopher://x"}, headers=ADMIN) as resp:
            assert resp.status == 400
            assert "http://HOST:PORT" in (await resp.json())["error"]["message"]
        with_password = {"url": "http://u:s3cr3t@127.0.0.1:1"}
        async with stack.session.post(admin, json=with_password, headers=ADMIN) as resp:
            assert resp.status == 400  # tokens go in --upstream-token, never in a URL
            text = await resp.text()
            # The URL check hides the userinfo as ***; the error table's redactor, which every
            # error message passes (this one since it is a domain error), writes it [redacted].
            assert "[redacted]@" in text and "s3cr3t" not in text
        async with stack.session.delete(f"{admin}/{extra.id}", headers=ADMIN) as resp:
            assert resp.status == 200
        assert [r.id for r in stack.pool] == [stack.sims[0].id]


async def test_admin_api_needs_the_admin_key() -> None:
    async with run_stack(1, admin_key="admin-secret", api_key="client-key") as stack:
        admin = stack.proxy_url + "/admin/replicas"
        for headers in (
            {},
            {"Authorization": "Bearer client-key"},
            {"X-Admin-Key": "admin-secret"},
        ):
            async with stack.session.get(admin, headers=headers) as resp:
                assert resp.status == 401
        async with stack.session.get(admin, headers=ADMIN) as resp:
            assert resp.status == 200


async def test_admin_api_is_off_without_an_admin_key() -> None:
    async with (
        run_stack(1) as stack,
        stack.session.get(stack.proxy_url + "/admin/replicas") as resp,
    ):
        assert resp.status == 403
        assert "--admin-key" in orjson.loads(await resp.read())["error"]["message"]
