"""The proxy's side of the scaler: ``POST /admin/scaler`` takes its report behind the admin key,
``/proxy/status`` shows it (``scaler``, with its age) and each replica's prompt and cached tokens
(what the scaler weighs before it retires one), and the metrics count the decisions by action
and the replicas by state. A real proxy in front of simulated replicas on loopback."""

from __future__ import annotations

from typing import Any

from aiohttp import ClientSession

from tests.support.fleet import run_stack

ADMIN = "the-admin-key"
REPORT: dict[str, Any] = {
    "action": "add",
    "asked": "add",
    "count": 1,
    "reason": "the trainer waited 31% of the last window for samples for 180 s",
    "held_back": None,
    "replicas": {"wanted": 3, "ready": 2, "starting": 1, "draining": 0},
    "bounds": {"min": 1, "max": 4, "ceiling": 4, "budget_per_h": None},
    "waited": 0.31,
    "scaled": [{"name": "r1-replica-2", "job": "abc", "state": "starting", "token": "x"}],
}


async def test_the_scalers_report_is_kept_shown_and_counted() -> None:
    async with run_stack(2, admin_key=ADMIN) as stack, ClientSession() as session:
        url = stack.proxy_url
        async with session.post(f"{url}/admin/scaler", json=REPORT) as answer:
            assert answer.status in (401, 403)  # the admin key, as every admin route
        headers = {"Authorization": f"Bearer {ADMIN}"}
        async with session.post(f"{url}/admin/scaler", json=REPORT, headers=headers) as answer:
            assert answer.status == 200, await answer.text()
        async with session.get(f"{url}/proxy/status") as answer:
            status = await answer.json()
        scaler = status["scaler"]
        assert scaler["action"] == "add" and scaler["reason"] == REPORT["reason"]
        assert scaler["replicas"] == REPORT["replicas"]
        assert scaler["scaled"] == [{"name": "r1-replica-2", "job": "abc", "state": "starting"}]
        assert scaler["age_s"] >= 0
        assert all({"prompt_tokens", "cached_tokens"} <= set(r) for r in status["replicas"])
        async with session.get(f"{url}/metrics") as answer:
            page = await answer.text()
        assert 'rollout_proxy_scaler_decisions_total{action="add"} 1.0' in page
        assert 'rollout_proxy_scaler_decisions_total{action="retire"} 0.0' in page
        assert 'rollout_proxy_scaler_replicas{state="starting"} 1.0' in page


async def test_a_report_that_is_not_one_is_refused_naming_the_field() -> None:
    async with run_stack(1, admin_key=ADMIN) as stack, ClientSession() as session:
        headers = {"Authorization": f"Bearer {ADMIN}"}
        for body, said in (
            ({**REPORT, "action": "panic"}, "action must be one of add, retire, hold"),
            ({**REPORT, "replicas": {"ready": -1}}, "replicas.wanted must be a whole number"),
        ):
            async with session.post(f"{stack.proxy_url}/admin/scaler", json=body,
                                    headers=headers) as answer:  # fmt: skip
                assert answer.status == 400
                assert said in await answer.text()
        async with session.get(f"{stack.proxy_url}/proxy/status") as answer:
            assert (await answer.json())["scaler"] is None  # nothing kept
        async with session.get(f"{stack.proxy_url}/metrics") as answer:
            assert "rollout_proxy_scaler_replicas{" not in await answer.text()
