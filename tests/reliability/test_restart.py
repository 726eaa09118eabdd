"""A restarted proxy rebuilds its view from the replicas and the bucket, with no manual step."""

from __future__ import annotations

import asyncio
from pathlib import Path

import aiohttp

from proxy.app import PROXY, build_app
from proxy.app import serve as serve_proxy
from proxy.config import Settings
from tests.support.adapters import write_adapter
from tests.support.calls import completion
from tests.support.fleet import FAST_HEALTH, run_sim
from tests.support.waiting import eventually, wait_for


async def test_restarted_proxy_rebuilds_replicas_and_versions(tmp_path: Path) -> None:
    adapters = tmp_path / ".vllm_lora"
    adapters.mkdir()
    async with run_sim() as a, run_sim() as b, aiohttp.ClientSession() as session:
        settings = Settings.model_validate(
            {
                "replicas": [a.url, b.url],
                "adapters_dir": str(adapters),
                "watch_interval": 0.05,
                **FAST_HEALTH,
            }
        )
        first = build_app(settings)
        async with serve_proxy(first) as url:
            await wait_for(
                lambda: len(first[PROXY].fleet.pool.routable()) == 2, what="first proxy ready"
            )
            path = write_adapter(adapters, "trl-policy-v1")
            body = {"lora_name": "trl-policy-v1", "lora_path": str(path)}
            async with session.post(url + "/v1/load_lora_adapter", json=body) as resp:
                assert resp.status == 200
        second = build_app(settings)  # a new process would start exactly like this
        async with serve_proxy(second) as url:
            await wait_for(
                lambda: len(second[PROXY].fleet.pool.routable()) == 2, what="second proxy ready"
            )
            # Requests for v1 are served at once: the replicas list it, the bucket has it.
            request = completion(model="trl-policy-v1")
            results = await asyncio.gather(
                *(session.post(url + "/v1/completions", json=request) for _ in range(6))
            )
            assert [r.status for r in results] == [200] * 6, [await r.read() for r in results]
            for r in results:
                r.release()

            async def in_step() -> bool:
                async with session.get(url + "/proxy/status") as resp:
                    status = await resp.json()
                return "trl-policy-v1" in status["adapters"]["wanted"] and all(
                    "trl-policy-v1" in r["adapters"] for r in status["replicas"]
                )

            await eventually(in_step, what="the version re-established from the bucket")
