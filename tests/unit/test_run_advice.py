"""The advisor per run (several runs on one fleet): each run judged through its own requests
beside the replicas' shared state; a run declared late warms up on its own."""

from __future__ import annotations

from dataclasses import replace

from proxy.insight.advisor import RunSample, Sample, advise, advise_run


def window(runs: dict[str, tuple[int, int]], *, late: str | None = None) -> list[Sample]:
    """Ten samples a second apart: two replicas with room, each run's (in flight, queued)
    steady, each run answering 5 requests a second; ``late`` is seen in the last 3 only."""
    samples = []
    for i in range(10):
        seen = {
            name: RunSample(inflight, queued, 5.0 * i)
            for name, (inflight, queued) in runs.items()
            if name != late or i >= 7
        }
        samples.append(
            Sample(
                at=float(i),
                inflight=sum(r.inflight for r in seen.values()),
                queued=sum(r.queued for r in seen.values()),
                replica_inflight={"r1": 4, "r2": 4},
                replica_waiting={"r1": 0.0, "r2": 0.0},
                replica_kv={"r1": 0.2, "r2": 0.2},
                requests=10.0 * i,
                runs=seen,
            )
        )
    return samples


def test_each_run_gets_its_own_verdict() -> None:
    samples = window({"a": (8, 0), "b": (0, 3)})
    # Run a holds 8 in flight, steady, with nothing queued: its TRL caps it.
    a = advise_run(samples, "a")
    assert a.verdict == "client-concurrency-bound"
    assert "raise TRL's max_inflight_tasks (e.g. to 16)" in a.action
    # Run b's requests wait at the proxy in every sample: the slots are full for it.
    assert advise_run(samples, "b").verdict == "generation-bound"
    # The fleet as a whole has requests queued: its own verdict says so too.
    assert advise(samples).verdict == "generation-bound"


def test_an_idle_run_and_a_run_declared_late() -> None:
    samples = window({"a": (8, 0), "b": (0, 0), "c": (2, 0)}, late="c")
    idle = [
        Sample(s.at, s.inflight, s.queued, s.replica_inflight, s.replica_waiting, s.replica_kv,
               s.requests, runs={**s.runs, "b": RunSample(0, 0, 0.0)})
        for s in samples
    ]  # fmt: skip
    assert advise_run(idle, "b").verdict == "idle"
    assert advise_run(samples, "c").verdict == "warming-up"  # 3 samples of it so far
    assert advise_run(samples, "gone").verdict == "warming-up"


def test_a_runs_stale_share_is_its_own() -> None:
    samples = window({"a": (8, 0), "b": (8, 0)})
    samples = [
        replace(s, runs={"a": replace(s.runs["a"], rollout_tokens=100.0 * i,
                                      stale_tokens=10.0 * i), "b": s.runs["b"]})
        for i, s in enumerate(samples)
    ]  # fmt: skip
    assert advise_run(samples, "a").verdict == "stale-waste"
    assert advise_run(samples, "b").verdict == "client-concurrency-bound"
