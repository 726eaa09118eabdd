"""The adapter registry through the proxy: mount lag, rollback, watcher pre-load, restarts."""

from __future__ import annotations

import asyncio
import shutil
import time
from pathlib import Path
from typing import Any

import aiohttp
import orjson

from proxy.app import PROXY, build_app
from proxy.app import serve as serve_proxy
from proxy.config import Settings
from proxy.dataplane.headers import REPLICA_HEADER
from tests.support.adapters import write_adapter
from tests.support.calls import listed, load, load_body, post, records
from tests.support.fleet import FAST_HEALTH, Stack, run_sim, run_stack
from tests.support.hub import LISTINGS, build_hub_app
from tests.support.servers import serve
from tests.support.waiting import eventually, wait_for

PROMPT = list(range(200, 260))


def rollout(model: str) -> dict[str, Any]:
    return {"model": model, "prompt": PROMPT, "max_tokens": 4, "return_token_ids": True}


async def loads_seen(stack: Stack, index: int, name: str) -> list[dict[str, Any]]:
    return [
        r
        for r in await records(stack, index)
        if r["path"] == "/v1/load_lora_adapter" and r.get("model") in (name, None)
    ]


async def test_lagging_mount_is_retried_and_load_returns_when_the_last_replica_sees_it(
    tmp_path: Path,
) -> None:
    sims = [{}, {"faults": {"mount_lag_s": 0.6}}, {}]
    async with run_stack(sims=sims, adapter_push=False) as stack:  # the mount path alone
        path = write_adapter(tmp_path, "trl-policy-v1")
        started = time.monotonic()
        status, body, _ = await load(stack, load_body("trl-policy-v1", path))
        took = time.monotonic() - started
        assert status == 200, body
        assert body == b"Success: LoRA adapter 'trl-policy-v1' added successfully."
        # As soon as the lagging replica sees the files: retries are at most 250 ms apart.
        assert 0.5 < took < 0.6 + 0.35
        for i in range(3):
            assert "trl-policy-v1" in await listed(stack, i)


async def test_bad_adapter_on_one_replica_rolls_back_everywhere(tmp_path: Path) -> None:
    # Rank 16 is above the third replica's --max-lora-rank: it refuses the adapter (4xx).
    sims = [{"max_lora_rank": 16}, {"max_lora_rank": 16}, {"max_lora_rank": 8}]
    async with run_stack(sims=sims) as stack:
        path = write_adapter(tmp_path, "trl-policy-v1", rank=16)
        status, body, _ = await load(stack, load_body("trl-policy-v1", path))
        assert 400 <= status < 500
        assert status != 404
        assert "rolled back on 2" in orjson.loads(body)["error"]["message"]
        for i in range(3):
            assert "trl-policy-v1" not in await listed(stack, i)
        # The version is unknown to the fleet again: a request for it is vLLM's 404.
        status, body, _ = await post(stack, "/v1/completions", rollout("trl-policy-v1"))
        assert status == 404


async def test_watcher_preloads_so_the_clients_load_returns_at_once(tmp_path: Path) -> None:
    adapters = tmp_path / ".vllm_lora"
    adapters.mkdir()
    async with run_stack(3, adapters_dir=str(adapters), watch_interval=0.05) as stack:
        write_adapter(adapters, "trl-policy-v1")
        await eventually(
            lambda: _all_listed(stack, "trl-policy-v1"), what="watcher pre-load on every replica"
        )
        started = time.monotonic()
        status, _, _ = await load(stack, load_body("trl-policy-v1", adapters / "trl-policy-v1"))
        assert status == 200
        assert time.monotonic() - started < 0.1
        for i in range(3):  # loaded once per replica: the client's load found it done
            assert len(await loads_seen(stack, i, "trl-policy-v1")) == 1
        # TRL deletes an old version's directory: it is dropped and never replayed.
        for n in range(2, 4):
            write_adapter(adapters, f"trl-policy-v{n}")
        await eventually(lambda: _all_listed(stack, "trl-policy-v3"), what="v3 pre-loaded")
        shutil.rmtree(adapters / "trl-policy-v1")
        await eventually(lambda: _none_listed(stack, "trl-policy-v1"), what="v1 dropped")
        assert "trl-policy-v1" not in stack.proxy_app[PROXY].adapters.service.registry.versions


async def _all_listed(stack: Stack, name: str) -> bool:
    return all([name in await listed(stack, i) for i in range(len(stack.sims))])


async def _none_listed(stack: Stack, name: str) -> bool:
    return not any([name in await listed(stack, i) for i in range(len(stack.sims))])


async def test_leftovers_from_an_earlier_run_are_unloaded_at_start(tmp_path: Path) -> None:
    adapters = tmp_path / ".vllm_lora"
    adapters.mkdir()
    old = write_adapter(tmp_path / "old-run", "trl-policy-v9")
    async with run_sim() as sim, aiohttp.ClientSession() as session:
        load_old = session.post(
            sim.url + "/v1/load_lora_adapter", json=load_body("trl-policy-v9", old)
        )
        async with load_old as resp:
            assert resp.status == 200
        settings = Settings.model_validate(
            {"replicas": [sim.url], "adapters_dir": str(adapters), **FAST_HEALTH}
        )
        app = build_app(settings)
        async with serve_proxy(app):
            await wait_for(lambda: len(app[PROXY].fleet.pool.routable()) == 1, what="admission")
        async with session.get(sim.url + "/v1/models") as resp:
            ids = [e["id"] for e in (await resp.json())["data"]]
        assert ids == ["sim-model"]


async def test_restarted_replica_gets_the_window_before_traffic(tmp_path: Path) -> None:
    async with run_stack(2, health_interval=0.05) as stack:
        for n in (1, 2):
            path = write_adapter(tmp_path, f"trl-policy-v{n}")
            assert (await load(stack, load_body(f"trl-policy-v{n}", path)))[0] == 200
        victim = stack.sims[1]
        port = victim.port
        await victim.stop()
        await wait_for(lambda: len(stack.pool.routable()) == 1, what="ejection")
        async with run_sim(port=port) as back:
            await wait_for(lambda: len(stack.pool.routable()) == 2, what="readmission")
            ids = [
                e["id"]
                for e in (await (await stack.session.get(back.url + "/v1/models")).json())["data"]
            ]
            assert {"trl-policy-v1", "trl-policy-v2"} <= set(ids)
            # Every completion it served named a version it had been given first.
            for _ in range(8):
                assert (await post(stack, "/v1/completions", rollout("trl-policy-v2")))[0] == 200


async def test_unseen_restart_is_retried_elsewhere_and_reconciled(tmp_path: Path) -> None:
    # Probes are slow: the restart happens between two of them.
    async with run_stack(2, health_interval=30, policy="least_loaded") as stack:
        path = write_adapter(tmp_path, "trl-policy-v1")
        assert (await load(stack, load_body("trl-policy-v1", path)))[0] == 200
        first = stack.sims[0]
        port = first.port
        await first.stop()
        async with run_sim(port=port) as back:
            # Least-loaded ties go to the first replica, which lost the adapter in its restart.
            status, body, headers = await post(stack, "/v1/completions", rollout("trl-policy-v1"))
            assert status == 200, body
            assert headers[REPLICA_HEADER] == stack.sims[1].id

            async def reloaded() -> bool:
                async with stack.session.get(back.url + "/v1/models") as resp:
                    return "trl-policy-v1" in [e["id"] for e in (await resp.json())["data"]]

            await eventually(reloaded, what="the restarted replica reconciled")


async def test_request_for_a_version_still_loading_waits(tmp_path: Path) -> None:
    sims = [{"faults": {"mount_lag_s": 0.4}}, {"faults": {"mount_lag_s": 0.4}}]
    async with run_stack(sims=sims, adapter_push=False) as stack:  # a load that takes a while
        path = write_adapter(tmp_path, "trl-policy-v1")
        loading = asyncio.create_task(load(stack, load_body("trl-policy-v1", path)))
        await wait_for(
            lambda: stack.proxy_app[PROXY].adapters.service.knows("trl-policy-v1"), what="loading"
        )
        status, _, _ = await post(stack, "/v1/completions", rollout("trl-policy-v1"))
        assert status == 200
        assert (await loading)[0] == 200
        # A version the fleet has never seen is vLLM's 404.
        status, body, _ = await post(stack, "/v1/completions", rollout("trl-policy-v99"))
        assert status == 404
        assert b"does not exist" in body


async def test_hub_bucket_source_with_the_real_client(tmp_path: Path) -> None:
    bucket = tmp_path / "hub" / "team" / "rollouts"
    mount = tmp_path / "hub" / "team" / "rollouts"  # replicas' mount shows the same files
    (bucket / "run1" / ".vllm_lora").mkdir(parents=True)
    hub = build_hub_app(tmp_path / "hub")
    async with serve(hub) as hub_url:
        settings: dict[str, Any] = {
            "adapters_bucket": "team/rollouts/run1/.vllm_lora",
            "adapters_mount": str(mount),
            "hub_endpoint": hub_url,
            "watch_interval": 0.05,
        }
        async with run_stack(2, **settings) as stack:
            write_adapter(bucket / "run1" / ".vllm_lora", "trl-policy-v1")
            await eventually(lambda: _all_listed(stack, "trl-policy-v1"), what="bucket pre-load")
            assert hub[LISTINGS]
            watcher = stack.proxy_app[PROXY].adapters.watcher
            assert watcher is not None and watcher.scans > 0
            status, _, _ = await post(stack, "/v1/completions", rollout("trl-policy-v1"))
            assert status == 200


async def test_unloading_a_version_the_proxy_retired_is_200(tmp_path: Path) -> None:
    adapters = tmp_path / ".vllm_lora"
    adapters.mkdir()
    async with run_stack(2, adapters_dir=str(adapters), watch_interval=0.05) as stack:
        write_adapter(adapters, "trl-policy-v1")
        await eventually(lambda: _all_listed(stack, "trl-policy-v1"), what="pre-load")
        shutil.rmtree(adapters / "trl-policy-v1")
        await eventually(lambda: _none_listed(stack, "trl-policy-v1"), what="retired")
        status, _, _ = await post(stack, "/v1/unload_lora_adapter", {"lora_name": "trl-policy-v1"})
        assert status == 200
