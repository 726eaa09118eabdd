"""Two RL runs through one proxy on one simulated fleet: each at ``/runs/<run>``, each isolated.

Both runs publish TRL's names (``trl-policy-v1``, ...): the replicas hold ``a.trl-policy-v1``
and ``b.trl-policy-v1``, each run sees and addresses only its own, one run's pause holds only
its own new requests, and a load past a run's share of ``max_loras`` is refused."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import orjson

from proxy.app import PROXY
from tests.support.adapters import write_adapter
from tests.support.calls import (
    listed,
    load_body,
    metric_value,
    metrics_text,
    post,
    records,
    rolled_out,
)
from tests.support.fleet import Stack, run_stack
from tests.support.waiting import eventually, wait_for

PROMPT = list(range(300, 340))


def rollout(model: str) -> dict[str, Any]:
    return {"model": model, "prompt": PROMPT, "max_tokens": 2, "return_token_ids": True}


async def get(stack: Stack, path: str) -> tuple[int, Any]:
    async with stack.session.get(stack.proxy_url + path) as response:
        return response.status, orjson.loads(await response.read())


async def run_load(stack: Stack, run: str, name: str, path: Path) -> tuple[int, bytes]:
    status, body, _ = await post(stack, f"/runs/{run}/v1/load_lora_adapter", load_body(name, path))
    return status, body


async def test_two_runs_share_the_fleet_under_their_own_names(tmp_path: Path) -> None:
    async with run_stack(2, runs="a,b=2") as stack:
        for run in ("a", "b"):
            path = write_adapter(tmp_path / run, "trl-policy-v1")
            status, body = await run_load(stack, run, "trl-policy-v1", path)
            assert status == 200, body
            # The answer reads with the run's own name.
            assert body == b"Success: LoRA adapter 'trl-policy-v1' added successfully."
        for i in range(2):
            assert set(await listed(stack, i)) >= {"a.trl-policy-v1", "b.trl-policy-v1"}
            assert "trl-policy-v1" not in await listed(stack, i)

        # Each run sees its own adapters under TRL's names, and the base model.
        status, models = await get(stack, "/runs/a/v1/models")
        assert status == 200
        assert [m["id"] for m in models["data"]] == ["sim-model", "trl-policy-v1"]
        # A request for the run's adapter reaches a replica under the replica's name.
        status, body, _ = await post(stack, "/runs/b/v1/completions", rollout("trl-policy-v1"))
        assert status == 200, body
        seen = [r for i in range(2) for r in await records(stack, i)]
        generated = [r for r in seen if rolled_out(r)]
        assert [r["model"] for r in generated] == ["b.trl-policy-v1"]
        # The base model goes as it is; an adapter the run does not have is vLLM's 404, in the
        # run's own words.
        status, body, _ = await post(stack, "/runs/a/v1/completions", rollout("sim-model"))
        assert status == 200, body
        status, body, _ = await post(stack, "/runs/a/v1/completions", rollout("trl-policy-v7"))
        assert status == 404
        assert b"`trl-policy-v7`" in body

        # Unloading run a's v1 leaves run b's.
        status, body, _ = await post(
            stack, "/runs/a/v1/unload_lora_adapter", {"lora_name": "trl-policy-v1"}
        )
        assert status == 200, body
        assert b"'trl-policy-v1'" in body and b"a.trl" not in body
        await stack.proxy_app[PROXY].adapters.service.settled()
        for i in range(2):
            names = set(await listed(stack, i))
            assert "b.trl-policy-v1" in names and "a.trl-policy-v1" not in names

        # /server_info shows each run its share of max_loras (the sims': 6), by weight 1:2.
        _, info_a = await get(stack, "/runs/a/server_info")
        _, info_b = await get(stack, "/runs/b/server_info")
        assert info_a["vllm_config"]["lora_config"]["max_loras"] == 2
        assert info_b["vllm_config"]["lora_config"]["max_loras"] == 4

        # Each run's state on the status page (also under the run's path, where the trainer
        # reads the fleet's figures) and on /metrics, labelled by run.
        status, page = await get(stack, "/runs/a/proxy/status")
        assert status == 200
        runs = page["runs"]
        assert (runs["a"]["adapters"], runs["b"]["adapters"]) == (0, 1)
        assert (runs["a"]["max_loras_share"], runs["b"]["max_loras_share"]) == (2, 4)
        assert runs["b"]["weight"] == 2.0 and runs["b"]["requests"] >= 2
        text = await metrics_text(stack)
        assert 'rollout_proxy_run_adapters{run="b"} 1.0' in text
        assert 'rollout_proxy_run_max_loras_share{run="a"} 2.0' in text


async def test_a_load_past_the_runs_share_is_refused_before_any_replica(tmp_path: Path) -> None:
    async with run_stack(1, runs="a,b=2", sim={"max_loras": 3}) as stack:  # a's share: 1
        first = write_adapter(tmp_path, "trl-policy-v1")
        status, body = await run_load(stack, "a", "trl-policy-v1", first)
        assert status == 200, body
        before = len(await records(stack, 0))
        second = write_adapter(tmp_path, "trl-policy-v2")
        status, body = await run_load(stack, "a", "trl-policy-v2", second)
        assert status == 400
        message = orjson.loads(body)["error"]["message"]
        assert "run a holds 1 adapters and its share of max_loras is 1" in message
        assert len(await records(stack, 0)) == before  # nothing reached the replica
        # Reloading the name it holds is not a new adapter: it fits.
        status, body = await run_load(stack, "a", "trl-policy-v1", first)
        assert status == 200, body


async def test_one_runs_pause_holds_only_its_own_new_requests(tmp_path: Path) -> None:
    async with run_stack(1, runs="a,b") as stack:
        status, body, _ = await post(stack, "/runs/a/pause", {})
        assert status == 200 and orjson.loads(body)["run"] == "a"
        held = asyncio.create_task(post(stack, "/runs/a/v1/completions", rollout("sim-model")))
        # Run b (and the bare path) go on while a is paused.
        status, body, _ = await post(stack, "/runs/b/v1/completions", rollout("sim-model"))
        assert status == 200, body
        status, body, _ = await post(stack, "/v1/completions", rollout("sim-model"))
        assert status == 200, body
        assert not held.done()
        assert not [r for r in await records(stack, 0) if r["path"] == "/pause"]
        _, page = await get(stack, "/proxy/status")
        assert (page["runs"]["a"]["paused"], page["runs"]["b"]["paused"]) == (True, False)
        status, _, _ = await post(stack, "/runs/a/resume", {})
        assert status == 200
        status, body, _ = await held
        assert status == 200, body


async def test_a_paused_run_answers_503_after_the_queue_timeout() -> None:
    async with run_stack(1, runs="a", queue_timeout=0.2) as stack:
        await post(stack, "/runs/a/pause", {})
        status, body, headers = await post(stack, "/runs/a/v1/completions", rollout("sim-model"))
        assert status == 503
        assert b"run a stayed paused" in body
        assert headers["Retry-After"] == "1"


async def test_an_unknown_run_is_404_naming_the_declared_ones() -> None:
    async with run_stack(1, runs="a,b") as stack:
        for path in ("/runs/c/v1/completions", "/runs/c/v1/load_lora_adapter"):
            status, body, _ = await post(stack, path, rollout("sim-model"))
            assert status == 404
            assert "no run 'c' on this proxy (runs: a, b)" in orjson.loads(body)["error"]["message"]
        status, _ = await get(stack, "/runs/c/v1/models")
        assert status == 404


async def test_without_runs_declared_every_run_path_is_404_and_the_bare_path_serves() -> None:
    async with run_stack(1) as stack:
        status, body, _ = await post(stack, "/runs/a/v1/completions", rollout("sim-model"))
        assert status == 404
        assert b"runs: none" in body
        status, body, _ = await post(stack, "/v1/completions", rollout("sim-model"))
        assert status == 200, body


async def test_the_admin_api_declares_reweighs_and_removes_runs(tmp_path: Path) -> None:
    async with run_stack(1, runs="a", admin_key="k") as stack:
        key = {"Authorization": "Bearer k"}
        status, body, _ = await post(stack, "/admin/runs", {"name": "b", "weight": 3}, headers=key)
        assert status == 201, body
        assert orjson.loads(body)["weight"] == 3.0
        status, body, _ = await post(stack, "/admin/runs", {"name": "b", "weight": 1}, headers=key)
        assert status == 200 and orjson.loads(body)["weight"] == 1.0
        for bad, words in (({"name": "x.y"}, b"run name 'x.y'"), ({"weight": 2}, b"the body must")):
            status, body, _ = await post(stack, "/admin/runs", bad, headers=key)
            assert status == 400 and words in body, body
        status, _, _ = await post(stack, "/admin/runs", {"name": "c"})  # no key
        assert status == 401
        path = write_adapter(tmp_path, "trl-policy-v1")
        status, body = await run_load(stack, "b", "trl-policy-v1", path)
        assert status == 200, body
        async with stack.session.delete(stack.proxy_url + "/admin/runs/b", headers=key) as answer:
            assert answer.status == 200
        status, body, _ = await post(stack, "/runs/b/v1/completions", rollout("sim-model"))
        assert status == 404
        await stack.proxy_app[PROXY].adapters.service.settled()
        assert "b.trl-policy-v1" not in await listed(stack, 0)  # unloaded behind the answer
        # Declared again, it starts afresh: a removed run leaves nothing behind in the proxy.
        status, body, _ = await post(stack, "/admin/runs", {"name": "b"}, headers=key)
        assert status == 201, body
        _, page = await get(stack, "/proxy/status")
        assert page["runs"]["b"]["requests"] == 0


async def test_a_runs_burst_does_not_queue_another_run_behind_it() -> None:
    """Run a fills the proxy's slots and queues more; run b's requests, queued after a's, reach
    the replica next (weighted fair share), not after a's whole burst (first come, first
    served). Each run's figures show its own slots and queue."""
    async with run_stack(1, runs="a,b", max_inflight_per_replica=2) as stack:
        limiter = stack.proxy_app[PROXY].dataplane.limiter
        sim = stack.sims[0].url
        async with stack.session.post(sim + "/pause?mode=keep") as response:
            assert response.status == 200  # the replica holds what it runs: slots stay taken

        def send(run: str, prompt: list[int]) -> asyncio.Task[Any]:
            body = {**rollout("sim-model"), "prompt": prompt}
            return asyncio.create_task(post(stack, f"/runs/{run}/v1/completions", body))

        burst = [send("a", PROMPT) for _ in range(6)]
        await wait_for(lambda: limiter.queued == 4, what="run a's burst queued behind 2 slots")
        later = [send("b", [*PROMPT, 7]) for _ in range(2)]
        await wait_for(lambda: limiter.queued == 6, what="run b's requests queued")
        _, status = await get(stack, "/proxy/status")
        runs = status["runs"]
        assert (runs["a"]["inflight"], runs["a"]["queued"]) == (2, 4)
        assert (runs["b"]["inflight"], runs["b"]["queued"]) == (0, 2)
        assert 'rollout_proxy_run_queued{run="b"} 2.0' in await metrics_text(stack)
        async with stack.session.post(sim + "/resume") as response:
            assert response.status == 200
        answers = await asyncio.gather(*burst, *later)
        assert [status for status, _, _ in answers] == [200] * 8
        seen = [r for r in await records(stack, 0) if rolled_out(r)]
        order = ["b" if r["prompt_tokens"] == len(PROMPT) + 1 else "a" for r in seen]
        # The first slot freed goes to b; both of b's arrive before a's last two (FIFO: last).
        assert order.index("b") == 2 and max(i for i, r in enumerate(order) if r == "b") <= 5


FAILS_FOR_A = {"faults": {"fail_status": 500, "fail_model": "a.trl-policy-v1"}}


async def load_both(stack: Stack, tmp_path: Path) -> None:
    for run in ("a", "b"):
        path = write_adapter(tmp_path / run, "trl-policy-v1")
        status, body = await run_load(stack, run, "trl-policy-v1", path)
        assert status == 200, body


async def test_one_runs_errors_do_not_eject_a_replica_for_the_others(tmp_path: Path) -> None:
    """Run a's adapter fails on every replica (its own fault): its requests get the replicas'
    500, and no circuit opens, so run b keeps the whole fleet."""
    async with run_stack(
        sims=[FAILS_FOR_A, FAILS_FOR_A], runs="a,b", breaker_failures=2, breaker_cooldown=60
    ) as stack:
        await load_both(stack, tmp_path)
        for _ in range(6):
            status, body, _ = await post(stack, "/runs/a/v1/completions", rollout("trl-policy-v1"))
            assert status == 500, body
        assert len(stack.pool.routable()) == 2
        text = await metrics_text(stack)
        assert metric_value(text, 'rollout_proxy_ejections_total{cause="circuit"}') == 0
        for _ in range(4):
            status, body, _ = await post(stack, "/runs/b/v1/completions", rollout("trl-policy-v1"))
            assert status == 200, body


async def test_a_replica_failing_a_run_that_another_serves_still_opens_its_circuit(
    tmp_path: Path,
) -> None:
    """The same errors on ONE replica, while the other serves those requests: the replica's
    fault, so its circuit opens as on the bare path."""
    async with run_stack(
        sims=[FAILS_FOR_A, {}], runs="a,b", breaker_failures=2, breaker_cooldown=60,
        policy="least_loaded",
    ) as stack:  # fmt: skip
        await load_both(stack, tmp_path)
        for _ in range(6):
            status, body, _ = await post(stack, "/runs/a/v1/completions", rollout("trl-policy-v1"))
            assert status == 200, body  # failed over
        await wait_for(lambda: len(stack.pool.routable()) == 1, what="the circuit to open")
        assert stack.pool.routable()[0].url == stack.sims[1].url


async def test_each_run_gets_the_advisors_verdict_on_it() -> None:
    """Run a keeps 4 requests in flight on a fleet with room; run b sends nothing: a's verdict
    is its own client's cap, b's idle, in /proxy/status, top's line and /metrics."""
    async with run_stack(2, runs="a,b", advice_window=2.0, sim={"gen_token_s": 0.01}) as stack:
        stop = asyncio.Event()

        async def client() -> None:
            while not stop.is_set():
                status, body, _ = await post(stack, "/runs/a/v1/completions", rollout("sim-model"))
                assert status == 200, body

        clients = [asyncio.create_task(client()) for _ in range(4)]
        seen: list[Any] = []

        async def judged() -> bool:
            _, status = await get(stack, "/proxy/status")
            seen.append({run: (status["runs"][run]["advice"] or {}).get("verdict")
                         for run in ("a", "b")})  # fmt: skip
            return bool(seen[-1] == {"a": "client-concurrency-bound", "b": "idle"})

        try:
            await eventually(judged, timeout=20.0, what="the runs' verdicts", interval=0.1)
            text = await metrics_text(stack)
        except AssertionError as exc:
            raise AssertionError(f"last verdicts: {seen[-1:]}") from exc
        finally:
            stop.set()
            await asyncio.gather(*clients)
        assert 'rollout_proxy_run_advice{run="a",verdict="client-concurrency-bound"} 1.0' in text
        assert 'rollout_proxy_run_advice{run="b",verdict="idle"} 1.0' in text
        assert 'rollout_proxy_run_advice{run="b",verdict="balanced"} 0.0' in text
