"""The scaler's parts alone: the replicas' spec as data and numbered, the configuration's JSON,
``--scale-policy``, the guard, the least-cache-loss choice, the job-to-replica mapping, the
state file, the report, the runner's survival, what the trainer job must hold, and that the
package imports the standard library and huggingface_hub only."""

from __future__ import annotations

import logging
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from deploy.install import Install
from deploy.jobs import JobView
from deploy.plan import RunPlan
from deploy.plan_jobs import replica_spec, scaler_config
from deploy.scale_flags import parse_policy
from deploy.scaler import guard
from deploy.scaler.actuator import Measured
from deploy.scaler.config import ScalerConfig, Scaling
from deploy.scaler.decide import Bounds, Decision, History, Policy
from deploy.scaler.fleet import Fleet, ProxyReplica, observe, proxy_replicas
from deploy.scaler.report import describe, report
from deploy.scaler.runner import Runner, ScalerUnavailable, from_environment
from deploy.scaler.state import ScalerState, StateFile
from deploy.specs import JobSpec

PLAN = RunPlan(run_name="r1", bucket="alice/rl", model="m", replicas=1,
               install=Install("image", None), namespace="alice", scale=Scaling(1, 3))  # fmt: skip
NOW = 1_800_000_000.0


def _job(index: int, stage: str = "RUNNING", *, scaled: bool = False) -> JobView:
    return JobView(f"job{index}", f"r1-replica-{index}", "replica", index, stage, None, (),
                   "h200", scaled=scaled, created_at=NOW - 100)  # fmt: skip


def _replica(host: str, *, routable: bool = True, cached: float = 0, inflight: int = 0,
             draining: bool = False) -> ProxyReplica:  # fmt: skip
    return ProxyReplica(f"{host}:8000", host, 8000, routable, draining, inflight, cached)


def test_a_spec_travels_as_data_and_numbers_itself_as_deploy_up_would() -> None:
    spec = replica_spec(PLAN, 0)
    assert JobSpec.of_data(spec.as_data()) == spec
    assert spec.numbered("r1", 4, scaling=True) == replica_spec(PLAN, 4)
    assert replica_spec(PLAN, 4).network.aliases == ("replica", "replica-4")  # type: ignore[union-attr]
    fixed = replace(PLAN, scale=None)
    assert replica_spec(fixed, 4).network.aliases == ("replica",)  # type: ignore[union-attr]


def test_the_configuration_round_trips_and_a_foreign_one_is_named() -> None:
    config = scaler_config(replace(PLAN, scale=Scaling(1, 3, 30.0, 4, Policy(window_s=20.0))))
    again = ScalerConfig.from_json(config.to_json())
    assert again == config
    assert again.bounds() == Bounds(1, 3, 5.0, 10.0, 30.0, 4)
    assert again.state_path == "/lora/r1/.scaler/scaler.json"
    with pytest.raises(ValueError, match=r"\$ROLLOUT_SCALER is not the scaler's configuration"):
        ScalerConfig.from_json('{"scaling": {}}')


def test_scale_policy_names_the_deciders_thresholds_and_durations_take_units() -> None:
    assert parse_policy("window=30s, sustain=2m,add_wait=0.2,drain-timeout=1h") == {
        "window_s": 30.0, "sustain_s": 120.0, "add_wait": 0.2, "drain_timeout_s": 3600.0,
    }  # fmt: skip
    for bad, said in (("window", "is not NAME=VALUE"), ("speed=3", "is not NAME=VALUE"),
                      ("add_wait=lots", "takes a number"), ("cooldown=-1", "above 0")):  # fmt: skip
        with pytest.raises(ValueError, match=said):
            parse_policy(bad)


def _fleet(*members: tuple[JobView, ProxyReplica | None]) -> Fleet:
    jobs = [job for job, _ in members]
    replicas = [replica for _, replica in members if replica is not None]
    addresses = {job.index: [r.host] for job, r in members if r is not None}
    return observe(jobs, replicas, addresses, 8000)


def test_the_guard_keeps_the_ceiling_the_draining_jobs_the_hours_launches_and_the_minimum() -> None:
    bounds = Bounds(1, 4, 5.0, 10.0, budget_per_h=26.0, max_launches_per_h=3)  # ceiling 3
    fleet = _fleet((_job(0), _replica("10.0.0.1")), (_job(1), _replica("10.0.0.2")))
    add = Decision("add", "", History(), 5)
    assert guard.admitted(add, fleet, bounds, [], NOW) == (
        1,
        "2 replica job(s) live, the bound is 3 (range 1..4, budget $26.00/h)",
    )
    assert guard.admitted(add, fleet, bounds, [NOW - 10, NOW - 20, NOW - 3599], NOW)[0] == 0
    assert guard.admitted(add, fleet, bounds, [NOW - 3601] * 3, NOW)[0] == 1
    draining = observe([_job(0), _job(1), _job(2)], [], {}, 8000, retiring={"job2"})
    assert guard.admitted(add, draining, bounds, [], NOW)[0] == 0  # it bills until it ends
    retire = Decision("retire", "", History(), 5)
    assert guard.admitted(retire, fleet, bounds, [], NOW) == (
        1,
        "the fleet would fall below its minimum of 1",
    )
    assert guard.admitted(Decision("hold", "", History()), fleet, bounds, [], NOW) == (0, None)


def test_the_retired_replica_is_the_one_whose_cache_served_least_then_the_idlest_newest() -> None:
    fleet = _fleet(
        (_job(0), _replica("10.0.0.1", inflight=3)),
        (_job(1), _replica("10.0.0.2", inflight=0)),
        (_job(2), _replica("10.0.0.3", inflight=0)),
        (_job(3), _replica("10.0.0.4", routable=False)),  # starting: never taken
    )
    cached = {"10.0.0.1:8000": 0.0, "10.0.0.2:8000": 900.0, "10.0.0.3:8000": 50.0}
    assert guard.least_loss(fleet, cached).job.index == 0  # type: ignore[union-attr]
    assert guard.least_loss(fleet, {}).job.index == 2  # type: ignore[union-attr]


def test_a_job_maps_to_the_replica_at_its_own_alias() -> None:
    status = {"replicas": [
        {"id": "[fd00::2]:8000", "url": "http://[fd00::2]:8000", "routable": True,
         "cached_tokens": 7},
        {"id": "10.0.0.9:8000", "url": "http://10.0.0.9:8000", "routable": False},
        {"id": "10.0.0.5:8000", "url": "http://10.0.0.5:8000", "routable": True},
    ]}  # fmt: skip
    replicas = proxy_replicas(status)
    jobs = [_job(0), _job(1), _job(2, "SCHEDULING"), _job(3, "ERROR")]
    addresses = {0: ["fd00:0::2"], 1: ["10.0.0.9", "10.0.0.5"], 2: []}  # 1: run again, elsewhere
    fleet = observe(jobs, replicas, addresses, 8000)
    assert [(m.job.index, m.replica.id if m.replica else None) for m in fleet.members] == [
        (0, "[fd00::2]:8000"), (1, "10.0.0.5:8000"), (2, None), (3, None),
    ]  # fmt: skip
    assert (fleet.ready, fleet.starting, fleet.draining, fleet.next_index) == (2, 1, 0, 4)
    assert fleet.members[0].replica.cached_tokens == 7  # type: ignore[union-attr]


def test_the_state_file_round_trips_and_a_bad_one_starts_fresh(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = StateFile(tmp_path / "s" / "scaler.json")
    assert store.load() == ScalerState()
    history = History(last_change_at=5.0, launches=(1.0, 2.0), added=(0.3, 2))
    state = ScalerState(history, {"j": 1.0}, {"j": 1.0}, {"k": 2.0}, ["x"], ["j"], 1, {"r": 3.0})
    store.save(state)
    assert store.load() == state
    store.path.write_text("{not json")
    with caplog.at_level(logging.WARNING):
        assert store.load() == ScalerState()
    assert "is not a scaler state" in caplog.text


def test_a_report_names_the_decision_the_counts_and_what_the_guard_held_back() -> None:
    fleet = _fleet((_job(0), _replica("10.0.0.1")), (_job(1, scaled=True), None))
    decision = Decision("add", "the trainer waited 40% of the last window", History(), 2)
    doc = report(decision, 1, "2 launches an hour at most", fleet, Measured(0.4, None, 3.0),
                 ScalerState(failed=1), Bounds(1, 4, 5.0), NOW, [_job(2, scaled=True)])  # fmt: skip
    assert doc["action"] == "add" and doc["count"] == 1
    assert doc["replicas"]["starting"] == 2  # r1-replica-1, and the launch of this decision
    assert doc["scaled"] == [
        {"name": "r1-replica-1", "job": "job1", "state": "starting"},
        {"name": "r1-replica-2", "job": "job2", "state": "starting"},
    ]
    line = describe(doc)
    assert line.startswith("add 1: the trainer waited 40% of the last window (ready 1, starting")
    assert "the guard let 1 add through: 2 launches an hour at most" in line
    assert "TRL dropped 3 stale sample(s) so far" in line
    refused = report(decision, 0, "at the bound", fleet, Measured(0.4), ScalerState(),
                     Bounds(1, 4, 5.0), NOW)  # fmt: skip
    assert (refused["action"], refused["asked"]) == ("hold", "add")


class _Failing:
    def __init__(self) -> None:
        self.calls = 0
        self.policy = Policy()

    def tick(self) -> None:
        self.calls += 1
        if self.calls < 3:
            raise OSError("the Hub is away")


def test_the_runner_survives_a_failing_pass_and_says_it_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    runner = Runner(_Failing(), poll_s=1.0)  # type: ignore[arg-type]
    with caplog.at_level(logging.INFO, logger="deploy.scaler"):
        for _ in range(4):
            runner.once()
    assert runner.errors == 2
    assert caplog.text.count("a pass failed (OSError: the Hub is away)") == 1
    assert "passes succeed again" in caplog.text


def test_the_trainer_job_must_hold_what_the_scaler_needs() -> None:
    assert from_environment({}, object(), "http://127.0.0.1:1") is None  # type: ignore[arg-type]
    env = {"ROLLOUT_SCALER": scaler_config(PLAN).to_json(), "HF_TOKEN": "t"}
    with pytest.raises(
        ScalerUnavailable,
        match=r"\$HF_NETWORK_GROUP_PREFIX, \$PROXY_ADMIN_KEY, "
        r"\$VLLM_API_KEY in the trainer job",
    ):
        from_environment(env, object(), "http://127.0.0.1:1")  # type: ignore[arg-type]


def test_the_scaler_imports_the_standard_library_and_huggingface_hub_only() -> None:
    """The trainer image and the simulator import it: no proxy, aiohttp, pydantic, torch."""
    code = (
        "import sys; import deploy.scaler.runner, deploy.scaler.decide\n"
        "bad = {'proxy', 'aiohttp', 'pydantic', 'torch', 'trl', 'orjson', 'prometheus_client'}\n"
        "print(sorted(bad & {name.split('.')[0] for name in sys.modules}))"
    )
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True,
                          text=True, timeout=60, check=True)  # fmt: skip
    assert done.stdout.strip() == "[]"
