"""The fleet simulator with a fleet and a workload that change during a run (``elastic.py``,
``scaling.py``, ``workloads.Lengths``): replicas join after their start-up and leave drained,
every rollout is answered exactly once, nothing goes to a replica that is not routable, and a
run where nothing changes is the run ``simulate`` makes."""

from __future__ import annotations

from dataclasses import replace

import pytest

from benchmarks.fleet.elastic import ElasticFleet, ElasticTrainer
from benchmarks.fleet.engine import Loop, Replica, Request
from benchmarks.fleet.model import GpuModel, ProxyModel, SyncModel, TrainerModel
from benchmarks.fleet.router import Router
from benchmarks.fleet.scaling import Scaler, simulate_elastic
from benchmarks.fleet.sim import simulate
from benchmarks.fleet.workloads import WORKLOADS, Lengths
from deploy.scaler.decide import Bounds
from deploy.scaler.decide import Policy as ScalerPolicy
from proxy.routing.prefix import PrefixPolicy

GPU = GpuModel(step_s=0.01, prefill_token_s=1e-5, seq_s=1e-4, kv_token_s=1e-7, kv_blocks=10_000)
TRAINER = TrainerModel(groups_per_step=4, max_inflight=64, train_s=1.0, max_tokens=512)
SYNC = SyncModel(sync_s=0.5)


def test_a_length_factor_multiplies_every_answer_and_its_cut() -> None:
    lengths = Lengths(end=3.0, over_steps=100)
    assert [lengths.factor(s) for s in (0, 50, 100, 400)] == [1.0, 2.0, 3.0, 3.0]
    assert Lengths(end=1 / 3, over_steps=100).factor(100) == pytest.approx(1 / 3)
    base = replace(WORKLOADS["long_tail"], decode_cap=256)
    grown = replace(base, lengths=lengths)
    for rollout in range(40):
        one = base.answer_tokens(0, rollout, 0, 1024)
        assert grown.answer_tokens(0, rollout, 0, 1024, step=0) == one
        assert grown.answer_tokens(0, rollout, 0, 1024, step=100) == pytest.approx(3 * one, abs=3)
    assert max(grown.answer_tokens(0, r, 0, 1024, step=100) for r in range(200)) == 768
    assert max(grown.answer_tokens(0, r, 0, 700, step=100) for r in range(200)) == 700


def test_the_default_lengths_change_nothing_at_any_step() -> None:
    workload = WORKLOADS["long_tail"]
    assert all(
        workload.answer_tokens(3, r, 0, 2048, step=s) == workload.answer_tokens(3, r, 0, 2048)
        for r in range(20)
        for s in (0, 7, 499)
    )


def test_a_fleet_that_never_changes_runs_as_simulate_runs() -> None:
    settings = {"workload": WORKLOADS["uniform"], "replicas": 2, "gpu": GPU, "trainer": TRAINER,
                "sync": SYNC, "proxy": ProxyModel(), "steps": 12}  # fmt: skip
    plain = simulate(PrefixPolicy(), informed=True, warmup=0, **settings)  # type: ignore[arg-type]
    elastic = simulate_elastic(PrefixPolicy(), informed=True, startup_s=60.0, **settings)  # type: ignore[arg-type]
    steps = [b - a for a, b in zip([0.0, *elastic.step_ends], elastic.step_ends, strict=False)]
    assert steps == plain.step_times
    assert elastic.wasted_tokens == plain.wasted_tokens
    assert elastic.replica_s == pytest.approx(2 * elastic.wall_s)


class Ledger:
    """Every request a replica was handed (with the state of that replica then) and every
    answer the trainer got."""

    def __init__(self, fleet: ElasticFleet) -> None:
        self.fleet = fleet
        self.sent: list[tuple[int, str, str]] = []  # (uid, replica, its state when handed one)
        self.answered: list[int] = []

    def watch(self, replica: Replica) -> None:
        handed = replica.submit

        def submit(request: Request) -> None:
            state = next(m.state for m in self.fleet.members if m.replica is replica)
            self.sent.append((request.uid, replica.id, state))
            done = request.done

            def answered(r: Request) -> None:
                self.answered.append(r.uid)
                done(r)

            request.done = answered
            handed(request)

        replica.submit = submit  # type: ignore[method-assign]


def changing_run(
    launch_at: float, retire_at: float, steps: int
) -> tuple[ElasticFleet, Ledger, ElasticTrainer, Router]:
    """A run of 2 replicas; one more launched at ``launch_at``, one retired at ``retire_at``."""
    loop = Loop()
    fleet = ElasticFleet(GPU, loop, startup_s=20.0)
    ledger = Ledger(fleet)
    router = Router(PrefixPolicy(), fleet.initial(2), True, ProxyModel(), loop, TRAINER.max_tokens)
    fleet.attach(router)
    run = ElasticTrainer(TRAINER, SYNC, WORKLOADS["multi_turn"], router, fleet.live, loop, steps,
                         0, 0)  # fmt: skip
    for member in fleet.members:
        ledger.watch(member.replica)
    joining = router.join

    def join(replica: Replica) -> None:
        ledger.watch(replica)
        joining(replica)

    router.join = join  # type: ignore[method-assign]
    loop.at(launch_at, fleet.launch)
    loop.at(retire_at, fleet.retire, 1)
    run.start()
    loop.run(lambda: run.finished)
    return fleet, ledger, run, router


def test_a_replica_joins_after_its_start_up_and_one_leaves_drained() -> None:
    fleet, ledger, _, router = changing_run(launch_at=10.0, retire_at=40.0, steps=20)
    launched = fleet.members[2]
    assert launched.launched_at == 10.0 and launched.ready_at == 30.0
    retired = [m for m in fleet.members if m.draining_at is not None]
    assert len(retired) == 1 and retired[0].gone_at is not None
    assert retired[0].draining_at == 40.0 < retired[0].gone_at  # it drained what ran there
    assert retired[0].replica not in fleet.live and retired[0].replica.id not in router.members
    # Nothing was handed to a replica starting, draining or gone; the new one took its share.
    assert {state for _, _, state in ledger.sent} == {"ready"}
    assert any(rid == launched.replica.id for _, rid, _ in ledger.sent)
    # Every request answered once at most; those unanswered are still in flight at the end.
    uids = [uid for uid, _, _ in ledger.sent]
    assert len(uids) == len(set(uids))
    assert len(ledger.answered) == len(set(ledger.answered))
    assert set(ledger.answered) <= set(uids)
    in_flight = {r.uid for m in fleet.members for r in m.replica.running.values()}
    in_flight |= {r.uid for m in fleet.members for r in m.replica.waiting}
    assert set(uids) - set(ledger.answered) == in_flight
    assert not router.queue


def test_gpu_time_counts_from_the_launch_until_the_replica_is_gone() -> None:
    fleet, _, run, _ = changing_run(launch_at=10.0, retire_at=40.0, steps=20)
    end = run.ends[-1]
    expected = sum(
        (m.gone_at if m.gone_at is not None else end) - m.launched_at for m in fleet.members
    )
    assert fleet.held_s(end) == pytest.approx(expected)
    assert fleet.members[2].held_s(end) == pytest.approx((fleet.members[2].gone_at or end) - 10.0)


def test_the_replica_retired_is_the_one_with_the_least_cached_prefix() -> None:
    loop = Loop()
    fleet = ElasticFleet(GPU, loop, startup_s=20.0)
    replicas = fleet.initial(3)
    router = Router(PrefixPolicy(), replicas, True, ProxyModel(), loop, 512)
    fleet.attach(router)
    replicas[0].free.update(dict.fromkeys(range(5)))
    replicas[1].free.update(dict.fromkeys(range(2)))
    replicas[2].free.update(dict.fromkeys(range(9)))
    fleet.retire(1)
    assert [m.state for m in fleet.members] == ["ready", "gone", "ready"]  # empty: gone at once
    fleet.retire(5)  # never the last one
    assert [m.state for m in fleet.members].count("ready") == 1


def test_the_scaler_adds_when_the_trainer_waits_and_the_fleet_grows_after_the_start_up() -> None:
    """One slow replica and a trainer that waits on it: the decider's add comes after the
    sustain time, and the replica it launches joins after its start-up."""
    policy = ScalerPolicy(window_s=10.0, sustain_s=20.0, cooldown_s=30.0, startup_s=15.0)
    scaler = Scaler(Bounds(min_replicas=1, max_replicas=3, replica_per_h=5.0, fixed_per_h=10.0),
                    policy)  # fmt: skip
    run = simulate_elastic(
        PrefixPolicy(), informed=True, workload=WORKLOADS["uniform"], replicas=1,
        gpu=replace(GPU, step_s=0.05), trainer=TRAINER, sync=SYNC, proxy=ProxyModel(),
        steps=30, startup_s=15.0, scaler=scaler,
    )  # fmt: skip
    adds = [d for d in run.decisions if d["action"] == "add"]
    assert adds and adds[0]["waited"] >= policy.add_wait
    first = adds[0]["at_s"]
    assert isinstance(first, float) and first >= policy.sustain_s
    joined = [t for t, ready, _, _ in run.timeline if ready == 2]
    assert joined and joined[0] == pytest.approx(first + 15.0)
    assert run.replica_s > run.wall_s  # more than the one replica it started with
