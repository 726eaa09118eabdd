"""Fan-out routes and a TRL-shaped client session through the proxy to three replicas."""

from __future__ import annotations

from pathlib import Path

import orjson

from proxy.app import PROXY
from tests.support.adapters import write_adapter
from tests.support.calls import completion, listed, load, load_body, post
from tests.support.fleet import run_stack
from tests.support.waiting import wait_for


async def test_trl_session_passes_through(tmp_path: Path) -> None:
    sims = [{"max_loras": 6}, {"max_loras": 4}, {"max_loras": 8, "max_lora_rank": 16}]
    async with run_stack(sims=sims) as stack:
        s = stack.session
        async with s.get(stack.proxy_url + "/health") as resp:
            assert resp.status == 200
        async with s.get(stack.proxy_url + "/server_info?config_format=json") as resp:
            info = (await resp.json())["vllm_config"]
        assert info["parallel_config"]["data_parallel_size"] == 1
        assert info["lora_config"]["max_loras"] == 4
        assert info["lora_config"]["max_lora_rank"] == 8
        async with s.get(stack.proxy_url + "/v1/models") as resp:
            models = (await resp.json())["data"]
        assert models[0]["id"] == "sim-model" and models[0]["max_model_len"] > 0

        status, body, _ = await post(stack, "/pause?mode=keep", b"")
        # Answered by the proxy: the replicas are not frozen, requests keep flowing.
        assert (status, orjson.loads(body)) == (200, {"status": "paused", "fleet": "generating"})
        assert not any(sim.state.engine.gate.paused for sim in stack.sims)
        status, _, _ = await post(stack, "/v1/completions", completion())
        assert status == 200
        path = write_adapter(tmp_path, "trl-policy-v1")
        status, body, _ = await post(
            stack, "/v1/load_lora_adapter", load_body("trl-policy-v1", path)
        )
        assert status == 200, body
        assert b"added successfully" in body
        for i in range(3):
            assert "trl-policy-v1" in await listed(stack, i)
        status, body, _ = await post(stack, "/resume", b"")
        assert (status, orjson.loads(body)) == (200, {"status": "resumed", "fleet": "generating"})
        syncs = (await (await s.get(stack.proxy_url + "/proxy/status")).json())["syncs"]
        assert syncs["pause"] == "answered" and syncs["count"] == 1
        assert syncs["paused_s"] == 0 and syncs["last_s"] > 0

        request = completion(model="trl-policy-v1")
        for _ in range(6):
            status, body, _ = await post(stack, "/v1/completions", request)
            assert status == 200
            choice = orjson.loads(body)["choices"][0]
            assert len(choice["token_ids"]) == 8
            assert len(choice["logprobs"]["token_logprobs"]) == 8
        async with s.get(stack.proxy_url + "/v1/models") as resp:
            ids = [entry["id"] for entry in (await resp.json())["data"]]
        assert ids == ["sim-model", "trl-policy-v1"]

        status, body, _ = await post(
            stack, "/v1/unload_lora_adapter", {"lora_name": "trl-policy-v1"}
        )
        assert status == 200  # answered at once; carried out in the background
        await stack.proxy_app[PROXY].adapters.service.settled()
        for i in range(3):
            assert "trl-policy-v1" not in await listed(stack, i)
        status, _, _ = await post(stack, "/reset_prefix_cache", b"")
        assert status == 200


async def test_mount_that_never_catches_up_is_504_with_rollback(tmp_path: Path) -> None:
    # The third replica's mount never catches up: it keeps answering "No adapter found".
    sims = [{}, {}, {"faults": {"mount_lag_s": 3600}}]
    async with run_stack(sims=sims, adapter_load_deadline=0.3, adapter_push=False) as stack:
        path = write_adapter(tmp_path, "trl-policy-v2")
        status, body, _ = await load(stack, load_body("trl-policy-v2", path))
        answer = orjson.loads(body)
        assert status == 504
        message = answer["error"]["message"]
        assert "on 1 of 3 replicas within 0.3 s" in message
        assert "(rolled back on 2)" in message
        outcomes = {r["replica"]: r["outcome"] for r in answer["replicas"]}
        assert outcomes == {
            stack.sims[0].id: "ok",
            stack.sims[1].id: "ok",
            stack.sims[2].id: "lagging",
        }
        lagging = next(r for r in answer["replicas"] if r["outcome"] == "lagging")
        assert lagging["attempts"] > 1
        for i in range(3):
            assert "trl-policy-v2" not in await listed(stack, i)


async def test_missing_path_and_bad_bodies(tmp_path: Path) -> None:
    async with run_stack(2, adapter_load_deadline=0.2) as stack:
        status, body, _ = await load(stack, load_body("x", tmp_path / "nope"))
        # Never 404 (TRL would read "runtime LoRA updating is off"): the files never showed.
        assert status == 504
        assert "did not become visible" in orjson.loads(body)["error"]["message"]
        status, body, _ = await post(stack, "/v1/load_lora_adapter", b"{broken")
        assert status == 400
        status, body, _ = await post(stack, "/v1/load_lora_adapter", {"lora_name": 3})
        assert status == 400
        assert b"lora_name" in body
        status, body, _ = await post(stack, "/v1/unload_lora_adapter", {"lora_name": "nope"})
        assert status == 404
        assert "cannot be found" in orjson.loads(body)["error"]["message"]


async def test_unreachable_replica_is_ejected_then_replayed(tmp_path: Path) -> None:
    from tests.support.fleet import run_sim

    async with run_stack(3, forward_pause=True) as stack:
        gone = stack.sims[2]
        port = gone.port
        await gone.stop()
        status, _, _ = await post(stack, "/pause?mode=keep", b"")
        assert status == 200
        path = write_adapter(tmp_path, "trl-policy-v1")
        status, body, _ = await post(
            stack, "/v1/load_lora_adapter", load_body("trl-policy-v1", path)
        )
        assert status == 200, body
        assert gone.id not in {r.id for r in stack.pool.routable()}
        # The replica comes back (same address, empty state): it must get the fleet's state
        # (the adapter, and the pause) before it is routable again.
        async with run_sim(port=port) as back:
            await wait_for(lambda: len(stack.pool.routable()) == 3, what="readmission")
            async with stack.session.get(back.url + "/v1/models") as resp:
                ids = [e["id"] for e in (await resp.json())["data"]]
            assert "trl-policy-v1" in ids
            assert back.state.engine.gate.paused
