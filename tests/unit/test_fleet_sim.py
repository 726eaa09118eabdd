"""The fleet simulator's models, checked against their closed forms (no sockets)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from benchmarks.fleet.engine import Loop, Replica, Request
from benchmarks.fleet.model import GpuModel, ProxyModel, SyncModel, TrainerModel
from benchmarks.fleet.sim import simulate
from benchmarks.fleet.steady_state import steady_state
from benchmarks.fleet.suite import POLICIES, run_grid
from benchmarks.fleet.workloads import WORKLOADS
from proxy.routing.prefix import PrefixPolicy

GPU = GpuModel(step_s=0.01, prefill_token_s=1e-5, seq_s=1e-4, kv_token_s=1e-7, kv_blocks=10_000)


def serve(
    gpu: GpuModel, *requests: tuple[float, list[int], int, str]
) -> tuple[dict[int, float], Replica]:
    """Submit (time, prompt, answer tokens, adapter) requests; when each one finished."""
    loop = Loop()
    replica = Replica("r", gpu, loop)
    done: dict[int, float] = {}
    for uid, (at, prompt, answer, lora) in enumerate(requests):
        request = Request(uid, prompt, answer, lora, lambda r: done.__setitem__(r.uid, loop.now))
        loop.at(at, replica.submit, request)
    loop.run(lambda: False)
    assert len(done) == len(requests)
    return done, replica


def test_one_request_takes_a_prefill_step_then_its_decode_steps() -> None:
    prompt = list(range(100))
    done, _ = serve(GPU, (0.0, prompt, 5, "v1"))
    prefill = GPU.step_time(100, 1, 100)
    # Four more tokens after the one the prefill step samples; the context grows by one a step.
    decode = sum(GPU.step_time(0, 1, 101 + i) for i in range(4))
    assert done[0] == pytest.approx(prefill + decode)


def test_a_repeated_prompt_hits_whole_blocks_and_another_adapter_misses() -> None:
    prompt = list(range(100))
    _, replica = serve(GPU, (0.0, prompt, 2, "v1"), (1.0, prompt, 2, "v1"), (2.0, prompt, 2, "v2"))
    assert replica.hit_tokens == (99 // 16) * 16  # the second request only
    assert replica.prompt_tokens == 300


def test_max_num_seqs_queues_the_rest() -> None:
    gpu = replace(GPU, max_num_seqs=1)
    done, _ = serve(gpu, (0.0, list(range(10)), 50, "v1"), (0.0, list(range(20, 30)), 50, "v1"))
    alone = serve(GPU, (0.0, list(range(20, 30)), 50, "v1"))[0][0]
    assert done[1] > done[0] + 0.9 * alone  # it ran after the first, not beside it


def test_an_arrival_cuts_a_decode_run_at_the_step_under_way() -> None:
    long_answer = (0.0, list(range(10)), 10_000, "v1")
    short = (5.0, list(range(50, 60)), 3, "v1")
    done, _ = serve(GPU, long_answer, short)
    assert done[1] < 5.5  # served within a few steps of its arrival, not after the long run


def test_too_little_kv_preempts_and_every_request_still_finishes() -> None:
    gpu = replace(GPU, kv_blocks=40)  # 640 tokens for 4 requests growing to ~400 each
    requests = [(0.0, list(range(i * 100, i * 100 + 100)), 300, "v1") for i in range(4)]
    _, replica = serve(gpu, *requests)
    assert replica.preemptions > 0
    assert replica.recomputed > 0
    assert not replica.running and not replica.used


def run(**overrides: object) -> tuple[float, float]:
    trainer = TrainerModel(groups_per_step=4, max_inflight=64, train_s=1.0, max_tokens=512)
    settings = {
        "workload": WORKLOADS["uniform"],
        "replicas": 2,
        "gpu": GPU,
        "trainer": trainer,
        "sync": SyncModel(sync_s=2.0),
        "proxy": ProxyModel(),
        "steps": 30,
        "warmup": 5,
        **overrides,
    }
    result = simulate(PrefixPolicy(), informed=True, **settings)  # type: ignore[arg-type]
    bound = steady_state(
        settings["workload"],  # type: ignore[arg-type]
        2,
        GPU,
        settings["trainer"],  # type: ignore[arg-type]
        settings["sync"],  # type: ignore[arg-type]
    )
    return sum(result.step_times) / len(result.step_times), bound.step_s


def test_the_steady_state_reference_is_close_to_the_simulated_step_time() -> None:
    mean, bound = run()
    assert bound <= mean * 1.02  # a bound on the long-run mean; a finite run is noisy
    assert mean <= bound * 1.25


def test_a_slow_trainer_makes_rollouts_stale_and_their_tokens_wasted() -> None:
    trainer = TrainerModel(
        groups_per_step=2, max_inflight=128, train_s=0.2, max_staleness=0, max_tokens=512
    )
    result = simulate(
        PrefixPolicy(),
        informed=True,
        workload=WORKLOADS["uniform"],
        replicas=2,
        gpu=GPU,
        trainer=trainer,
        sync=SyncModel(sync_s=0.1, every=1),
        proxy=ProxyModel(),
        steps=12,
        warmup=2,
    )
    assert result.wasted_tokens > 0


def test_the_grid_has_a_row_per_policy_and_the_steady_state_reference() -> None:
    trainer = TrainerModel(groups_per_step=3, max_tokens=256, train_s=0.5)
    rows = run_grid(
        GPU, trainer, SyncModel(sync_s=1.0), ProxyModel(), quick=True, workloads=("uniform",),
        sizes=(2,),
    )  # fmt: skip
    assert [r["policy"] for r in rows] == [*POLICIES, "steady_state"]
    for r in rows:
        for key in ("workload", "replicas", "policy", "step_time_p50_s", "step_time_p99_s",
                    "lower_bound_s", "of_lower_bound", "steady_state_s", "of_steady_state",
                    "hit_rate", "utilization", "preemptions", "wasted_tokens"):  # fmt: skip
            assert key in r


def test_a_sync_that_does_not_freeze_the_fleet_costs_only_the_trainer() -> None:
    frozen, _ = run()
    flowing, _ = run(sync=SyncModel(sync_s=2.0, frozen=False))
    assert flowing < frozen  # the fleet generates while the trainer waits for the sync
