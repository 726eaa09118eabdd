"""The bottleneck advisor's verdicts, each on a simulated-replica scenario built to produce it
(advice window: 2 s), and its rules on hand-made windows."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Callable, Coroutine
from dataclasses import replace
from typing import Any

from proxy.app import PROXY
from proxy.insight.advisor import MIN_SAMPLES, Sample, advise
from proxy.insight.sampler import SAMPLES
from tests.support.calls import completion, metric_value, metrics_text, post
from tests.support.clock import FakeClock
from tests.support.fleet import Stack, run_stack
from tests.support.waiting import eventually

WINDOW: dict[str, Any] = {"advice_window": 2.0}
SLOW: dict[str, Any] = {"gen_token_s": 0.01}  # 8 tokens: ~80 ms per request, so requests overlap
VERDICT_S = 20.0  # a generous bound for a verdict to settle on a busy machine


async def verdict(stack: Stack) -> dict[str, Any]:
    async with stack.session.get(stack.proxy_url + "/proxy/status") as resp:
        advice: dict[str, Any] = (await resp.json())["advice"]
        return advice


async def settles_on(
    stack: Stack, wanted: str, load: Callable[[asyncio.Event], Coroutine[Any, Any, None]]
) -> dict[str, Any]:
    stop = asyncio.Event()
    task = asyncio.create_task(load(stop))
    seen: list[dict[str, Any]] = []

    async def settled() -> bool:
        assert not task.done() or task.exception() is None, task.exception()
        seen.append(await verdict(stack))
        return bool(seen[-1]["verdict"] == wanted)

    try:
        # Every 100 ms: a status request takes CPU from the load being judged.
        await eventually(settled, timeout=VERDICT_S, what=wanted, interval=0.1)
    except AssertionError as exc:
        raise AssertionError(f"last advice: {seen[-1:]}") from exc
    else:
        return seen[-1]
    finally:
        stop.set()
        await task


def closed_loop(
    stack: Stack, concurrency: Callable[[], int], headers: dict[str, str] | None = None
) -> Callable[[asyncio.Event], Coroutine[Any, Any, None]]:
    """A client keeping ``concurrency()`` requests in flight (read again after each request)."""
    counter = itertools.count()
    headers = headers or {}

    async def worker(slot: int, stop: asyncio.Event) -> None:
        while not stop.is_set():
            if slot >= concurrency():
                # Kept: the level is a function of the real clock (``_varying``), so an idle
                # slot looks again shortly; there is no event to wait on.
                await asyncio.sleep(0.02)
                continue
            n = next(counter)
            payload = completion(prompt=[n % 97] * 48 + [n % 5] * 16)
            await post(stack, "/v1/completions", payload, headers=headers)

    async def load(stop: asyncio.Event) -> None:
        await asyncio.gather(*(worker(slot, stop) for slot in range(16)))

    return load


async def test_a_client_at_its_own_cap_is_client_concurrency_bound() -> None:
    async with run_stack(2, sim=SLOW, **WINDOW) as stack:
        advice = await settles_on(stack, "client-concurrency-bound", closed_loop(stack, lambda: 6))
        assert "max_inflight_tasks" in advice["action"]
        assert advice["figures"]["inflight_peak"] <= 6


async def test_full_replicas_are_generation_bound() -> None:
    async with run_stack(2, sim=SLOW, max_inflight_per_replica=2, **WINDOW) as stack:
        advice = await settles_on(stack, "generation-bound", closed_loop(stack, lambda: 12))
        assert "add replicas" in advice["action"]
        assert advice["figures"]["queued_mean"] > 0


async def test_long_pauses_are_sync_bound() -> None:
    async with run_stack(2, forward_pause=True, **WINDOW) as stack:

        async def syncs(stop: asyncio.Event) -> None:
            while not stop.is_set():
                # Kept: the pauses' length on the real clock is the scenario (sync-bound).
                assert (await post(stack, "/pause?mode=keep", None))[0] == 200
                await asyncio.sleep(0.3)
                assert (await post(stack, "/resume", None))[0] == 200
                await asyncio.sleep(0.05)

        advice = await settles_on(stack, "sync-bound", syncs)
        assert advice["figures"]["paused_share"] >= 0.2
        assert "weight_sync_steps" in advice["action"]


def _varying() -> Callable[[], int]:
    """Concurrency that changes every 150 ms (no plateau): 2, 5, 8, 3, 6, ..."""
    levels = [2, 5, 8, 3, 6, 9, 4, 7]
    return lambda: levels[int(time.monotonic() / 0.15) % len(levels)]


async def test_one_replica_carrying_the_load_is_imbalanced() -> None:
    async with run_stack(2, sim=SLOW, **WINDOW) as stack:
        pinned = closed_loop(stack, _varying(), headers={"X-Routing-Key": "one-for-all"})
        advice = await settles_on(stack, "imbalanced", pinned)
        assert advice["figures"]["load_spread"] >= 1.5


async def test_routing_that_scatters_groups_is_cache_poor() -> None:
    async with run_stack(3, policy="round_robin", **WINDOW) as stack:
        prompts = itertools.count()

        async def groups(stop: asyncio.Event) -> None:
            while not stop.is_set():  # GRPO: 4 rollouts of one prompt, one after another
                n = next(prompts)
                prompt = [n % 251 + 1] * 400 + [n % 7] * 32  # ~1.7 KB: chunks of reuse
                for _ in range(4):
                    await post(stack, "/v1/completions", completion(prompt=prompt))

        advice = await settles_on(stack, "cache-poor", groups)
        assert advice["figures"]["affinity_efficiency"] < 0.6
        text = await metrics_text(stack)
        assert metric_value(text, 'rollout_proxy_advice{verdict="cache-poor"}') == 1


def _window(**overrides: Any) -> list[Sample]:
    base: dict[str, Any] = {"inflight": 4, "queued": 0, "replica_inflight": {"a": 2, "b": 2}}
    base.update(overrides)
    return [
        Sample(at=float(t), requests=10.0 * t, **{k: v for k, v in base.items()}) for t in range(10)
    ]


def test_a_short_window_is_warming_up_and_an_empty_one_idle() -> None:
    assert advise(_window()[:3]).verdict == "warming-up"
    quiet = [Sample(at=float(t), inflight=0, queued=0) for t in range(10)]
    assert advise(quiet).verdict == "idle"


def test_saturation_by_vllms_own_queue_or_kv_is_generation_bound() -> None:
    waiting = _window(replica_waiting={"a": 3.0, "b": 0.0})
    assert advise(waiting).verdict == "generation-bound"
    kv = _window(replica_kv={"a": 0.95, "b": 0.5})
    assert advise(kv).verdict == "generation-bound"


def test_sync_bound_names_push_only_when_adapters_do_not_travel_by_push_yet() -> None:
    paused = [
        Sample(at=float(t), inflight=4, queued=0, requests=10.0 * t, paused_s=0.5 * t, pushing=p)
        for p in (False, True)
        for t in range(10)
    ]
    mount, push = advise(paused[:10]), advise(paused[10:])
    assert mount.verdict == push.verdict == "sync-bound"
    assert "turn on adapter push" in mount.action
    assert "pushed already" in push.action and "turn on" not in push.action


def test_rollouts_answered_after_their_version_left_the_window_are_stale_waste() -> None:
    """5 % of the window's rollout tokens stale: before saturation, the verdict is the waste,
    with the in-flight count to try; 1 % (under the what-if's 3 % budget) is not."""
    wasteful = _window(replica_waiting={"a": 3.0, "b": 0.0})
    wasteful = [replace(s, rollout_tokens=1000.0 * i, stale_tokens=50.0 * i)
                for i, s in enumerate(wasteful)]  # fmt: skip
    advice = advise(wasteful)
    assert advice.verdict == "stale-waste"
    assert advice.figures["stale_share"] == 0.05
    assert "lower TRL's max_inflight_tasks (to about 4;" in advice.action
    slight = [replace(s, stale_tokens=10.0 * i) for i, s in enumerate(wasteful)]
    assert advise(slight).verdict == "generation-bound"


async def test_one_prompt_sent_again_and_again_is_concentrated_not_balanced() -> None:
    """The issue's case end to end: 41 requests of one prompt, one at a time, land on one of
    three replicas by prefix affinity; the advisor says so, and why, instead of ``balanced``.

    The proxy runs on a hand-driven clock and the test takes the advisor's samples itself:
    the window holds all 41 requests however long the machine takes to answer them (on the
    real clock a busy machine stretched them past the window, which then held 34-36)."""
    clock = FakeClock()
    async with run_stack(3, advice_window=4.0, clock=clock) as stack:
        sampler = stack.proxy_app[PROXY].sampler
        step = sampler.window_s / SAMPLES

        async def sample() -> None:
            clock.advance(step)
            await sampler.sample()

        for _ in range(MIN_SAMPLES):
            await sample()
        assert (await verdict(stack))["verdict"] == "idle"
        owners = set()
        for _ in range(41):
            status, body, headers = await post(stack, "/v1/completions", completion())
            assert status == 200, body
            owners.add(headers["X-Rollout-Replica"])
        assert len(owners) == 1
        (owner,) = owners
        await sample()
        advice = await verdict(stack)
        assert advice["verdict"] == "concentrated", advice
        assert advice["action"].startswith(f"{owner} took 41 of the window's 41 requests (100%")
        assert "prefix affinity" in advice["action"]
        assert advice["figures"]["requests_busiest_share"] == 1.0
