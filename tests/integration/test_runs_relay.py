"""Two trainers' relays on one remote proxy, each pointed at its run's URL (``/runs/<run>``):
each pushes its own ``trl-policy-v1`` (different bytes, same name, same local path shape) into
the remote proxy's receiver, and the replicas hold both, each run's under its own name."""

from __future__ import annotations

import asyncio
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import aiohttp

from proxy.app import PROXY, build_app, serve
from proxy.config import Settings
from proxy.fleet.pool import ReplicaPool
from tests.support.adapters import write_adapter
from tests.support.calls import completion, load_body, rolled_out
from tests.support.fleet import FAST_HEALTH, run_sim
from tests.support.waiting import wait_for

# The replicas' mounts never show a version: push only.
NEVER: dict[str, Any] = {"faults": {"mount_lag_s": 3600}}


async def test_two_runs_relays_push_the_same_name_and_each_run_gets_its_own(
    tmp_path: Path,
) -> None:
    async with AsyncExitStack() as exits:
        sims = [await exits.enter_async_context(run_sim(**NEVER)) for _ in range(2)]
        remote_app = build_app(
            Settings.model_validate(
                {"replicas": [s.url for s in sims], "runs": "a,b", **FAST_HEALTH}
            )
        )
        remote = await exits.enter_async_context(serve(remote_app))
        relays = {}
        for run in ("a", "b"):
            app = build_app(
                Settings.model_validate({"replicas": [f"{remote}/runs/{run}"], **FAST_HEALTH})
            )
            relays[run] = (await exits.enter_async_context(serve(app)), app)
        session = await exits.enter_async_context(aiohttp.ClientSession())
        for _, relay_app in relays.values():
            pool = relay_app[PROXY].fleet.pool

            def routable(pool: ReplicaPool = pool) -> bool:
                return len(pool.routable()) == 1

            await wait_for(routable, what="relay routable")

        ranks = {"a": 1, "b": 2}  # different bytes under one name
        for run, (url, _) in relays.items():
            path = write_adapter(tmp_path / run / ".vllm_lora", "trl-policy-v1", rank=ranks[run])
            async with session.post(
                url + "/v1/load_lora_adapter", json=load_body("trl-policy-v1", path)
            ) as response:
                assert response.status == 200, await response.text()

        store = remote_app[PROXY].adapters.receiver.store
        entries = await asyncio.to_thread(store.entries)
        assert sorted(e.name for e in entries) == ["a.trl-policy-v1", "b.trl-policy-v1"]
        for sim in sims:
            async with session.get(sim.url + "/v1/models") as response:
                names = {card["id"] for card in (await response.json())["data"][1:]}
            assert names == {"a.trl-policy-v1", "b.trl-policy-v1"}
        # Each relay (TRL's view) lists its own version under TRL's name, and generates with it:
        # the replicas are asked for that run's adapter, never the other's.
        for run, (url, _) in relays.items():
            async with session.get(url + "/v1/models") as response:
                cards = (await response.json())["data"]
            assert [c["id"] for c in cards] == ["sim-model", "trl-policy-v1"]
            async with session.post(
                url + "/v1/completions", json=completion("trl-policy-v1")
            ) as response:
                assert response.status == 200, await response.text()
            asked = []
            for sim in sims:
                async with session.get(sim.url + "/sim/requests") as response:
                    data = await response.json()
                records = data["records"] if isinstance(data, dict) else data
                asked += [r["model"] for r in records if rolled_out(r)]
            assert asked.count(f"{run}.trl-policy-v1") == 1, asked
            assert set(asked) <= {"a.trl-policy-v1", "b.trl-policy-v1"}, asked
