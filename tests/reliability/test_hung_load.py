"""TRL's load with one replica hung (accepts, never answers, like a SIGSTOPped vLLM): answered
200 within ``--adapter-load-deadline`` (+ 2 s) while the other replica holds the version, whether
health ejects the hung one first or not; once it answers again it gets the version before a
request for it is routed there."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from tests.support.adapters import write_adapter
from tests.support.calls import completion, listed, load_body, post
from tests.support.fleet import Stack, run_stack
from tests.support.waiting import eventually, wait_for

DEADLINE_S = 2.0  # --adapter-load-deadline
ANSWER_BOUND_S = DEADLINE_S + 2.0  # the acceptance: the deadline and 2 s
RECOVERY_BOUND_S = 30.0


def _rid(stack: Stack, index: int) -> str:
    """The replica id the proxy knows replica ``index`` by (its relay's address)."""
    return stack.relays[index].url.split("//", 1)[1]


async def _load_with_replica_0_hung(stack: Stack, tmp_path: Path) -> float:
    v1 = write_adapter(tmp_path, "trl-policy-v1")
    assert (await post(stack, "/v1/load_lora_adapter", load_body("trl-policy-v1", v1)))[0] == 200
    stack.relays[0].freeze()
    v2 = write_adapter(tmp_path, "trl-policy-v2")
    started = time.monotonic()
    load = post(stack, "/v1/load_lora_adapter", load_body("trl-policy-v2", v2))
    status, body, _ = await asyncio.wait_for(load, ANSWER_BOUND_S + 5.0)  # else: it hangs on
    seconds = time.monotonic() - started
    assert status == 200, body
    assert "trl-policy-v2" in await listed(stack, 1)
    # Meanwhile the version's requests go to the replica that holds it.
    for _ in range(4):
        status, body, headers = await post(
            stack, "/v1/completions", completion(model="trl-policy-v2")
        )
        assert status == 200, body
        assert headers["X-Rollout-Replica"] == _rid(stack, 1)
    return seconds


async def _served_there_only_after_its_load(stack: Stack) -> None:
    stack.relays[0].thaw()

    async def loaded() -> bool:
        return "trl-policy-v2" in await listed(stack, 0)

    await eventually(loaded, RECOVERY_BOUND_S, "the version loaded on the thawed replica")
    hung = stack.pool.get(_rid(stack, 0))
    assert hung is not None
    await wait_for(lambda: hung.routable, RECOVERY_BOUND_S, "the thawed replica routable")
    calls = [(r.path, r.model) for r in stack.sims[0].state.records if r.model == "trl-policy-v2"]
    assert calls[0] == ("/v1/load_lora_adapter", "trl-policy-v2"), calls


async def test_a_hung_replica_health_has_not_ejected_is_answered_without_at_the_deadline(
    tmp_path: Path,
) -> None:
    async with run_stack(
        2, relays=True, health_timeout=60.0, adapter_load_deadline=DEADLINE_S
    ) as stack:
        seconds = await _load_with_replica_0_hung(stack, tmp_path)
        assert DEADLINE_S <= seconds < ANSWER_BOUND_S, seconds
        assert all(r.routable for r in stack.pool)  # not ejected: the deadline answered it
        await _served_there_only_after_its_load(stack)


async def test_a_hung_replica_ejected_by_health_is_let_go_at_once(tmp_path: Path) -> None:
    async with run_stack(2, relays=True, health_timeout=0.3, adapter_load_deadline=60.0) as stack:
        seconds = await _load_with_replica_0_hung(stack, tmp_path)
        assert seconds < ANSWER_BOUND_S, seconds  # at the ejection, not the 60 s deadline
        assert _rid(stack, 0) not in {r.id for r in stack.pool.routable()}  # ejected
        await _served_there_only_after_its_load(stack)


async def test_with_every_replica_gone_a_moment_the_load_waits_for_one_back(tmp_path: Path) -> None:
    """The only replica hangs, is ejected mid-load, then answers again (a proxy upstream that
    restarts, behind the trainer's relay): the load is carried out on its readmission within the
    deadline and answered 200, not 502 at the ejection."""
    async with run_stack(1, relays=True, health_timeout=0.3, adapter_load_deadline=60.0) as stack:
        hung = stack.pool.get(_rid(stack, 0))
        assert hung is not None
        stack.relays[0].freeze()
        v1 = write_adapter(tmp_path, "trl-policy-v1")
        load = asyncio.create_task(
            post(stack, "/v1/load_lora_adapter", load_body("trl-policy-v1", v1))
        )
        await wait_for(lambda: not hung.routable, RECOVERY_BOUND_S, "the replica ejected")
        assert not load.done()
        stack.relays[0].thaw()
        status, body, _ = await asyncio.wait_for(load, RECOVERY_BOUND_S)
        assert status == 200, body
        assert "trl-policy-v1" in await listed(stack, 0)
