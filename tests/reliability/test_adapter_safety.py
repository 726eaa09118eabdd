"""Adapter safety under races: the fleet ends consistent, and no request is served by a replica
without the version it named."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from proxy.app import PROXY
from tests.support.adapters import write_adapter
from tests.support.calls import listed, load, load_body, post
from tests.support.fleet import Stack, run_sim, run_stack
from tests.support.waiting import eventually, wait_for

PROMPT = list(range(300, 350))


def rollout(model: str) -> dict[str, Any]:
    return {"model": model, "prompt": PROMPT, "max_tokens": 2}


async def inconsistent(stack: Stack) -> list[str]:
    """The routable replicas that do not hold exactly the registry's wanted versions."""
    wanted = set(stack.proxy_app[PROXY].adapters.service.versions)
    routable = {r.id for r in stack.pool.routable()}
    return [
        sim.id
        for index, sim in enumerate(stack.sims)
        if sim.id in routable and set(await listed(stack, index)) - {"sim-model"} != wanted
    ]


async def consistent(stack: Stack) -> None:
    """Every routable replica holds exactly the registry's wanted versions."""
    assert await inconsistent(stack) == []


async def settled(stack: Stack, what: str) -> None:
    """Until the fan-outs still running in the background leave the fleet consistent."""

    async def done() -> bool:
        return not await inconsistent(stack)

    await eventually(done, timeout=10.0, what=what)


async def test_concurrent_loads_of_different_versions(tmp_path: Path) -> None:
    async with run_stack(3, sim={"max_loras": 6}) as stack:
        paths = {n: write_adapter(tmp_path, f"trl-policy-v{n}") for n in range(1, 9)}
        results = await asyncio.gather(
            *(load(stack, load_body(f"trl-policy-v{n}", p)) for n, p in paths.items())
        )
        assert all(status == 200 for status, _, _ in results)
        await settled(stack, "the window's unloads (they run in the background)")
        await consistent(stack)
        assert len(stack.proxy_app[PROXY].adapters.service.versions) == 6  # the window: max_loras


async def test_load_racing_unload(tmp_path: Path) -> None:
    async with run_stack(3) as stack:
        path = write_adapter(tmp_path, "trl-policy-v1")
        for _ in range(5):
            await asyncio.gather(
                load(stack, load_body("trl-policy-v1", path)),
                post(stack, "/v1/unload_lora_adapter", {"lora_name": "trl-policy-v1"}),
            )
            await settled(stack, "the racing load and unload to finish")
            await consistent(stack)


async def test_load_during_a_replica_restart(tmp_path: Path) -> None:
    async with run_stack(3) as stack:
        first = write_adapter(tmp_path, "trl-policy-v1")
        assert (await load(stack, load_body("trl-policy-v1", first)))[0] == 200
        victim = stack.sims[2]
        port = victim.port
        await victim.stop()
        second = write_adapter(tmp_path, "trl-policy-v2")
        status, _, _ = await load(stack, load_body("trl-policy-v2", second))
        assert status == 200  # the unreachable replica is ejected, not fatal
        async with run_sim(port=port) as back:
            await wait_for(lambda: len(stack.pool.routable()) == 3, what="readmission")
            stack.sims[2] = back
            await consistent(stack)
            # Requests for v2 only ever reach replicas that have it.
            for _ in range(12):
                status, body, _ = await post(stack, "/v1/completions", rollout("trl-policy-v2"))
                assert status == 200, body
            served = [
                r
                for s in stack.sims
                for r in s.state.records
                if r.path == "/v1/completions" and r.model == "trl-policy-v2"
            ]
            assert served
            assert all(r.status == 200 for r in served)
