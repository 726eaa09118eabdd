"""The trainer's figures for the scaler (``trainer_entry.scaling``): the share of each window
the trainer was blocked on TRL's rollout queue (an empty queue's timeouts included), the time
left at the window's pace, and TRL's dropped stale total summed over its logging steps. A fake
clock; a queue of the test's own whose takes last what the test says."""

from __future__ import annotations

import queue
from typing import Any

import pytest

from trainer_entry.progress import Counted, need
from trainer_entry.scaling import TrainerSignals


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class SlowQueue:
    """A queue whose next take blocks ``takes_s`` of the clock, then gives a sample or, when
    it has none, raises ``queue.Empty`` as TRL's timed get does."""

    def __init__(self, clock: Clock) -> None:
        self.clock, self.takes_s, self.samples = clock, 0.0, 0

    def get(self, block: bool = True, timeout: float | None = None) -> Any:
        self.clock.now += self.takes_s
        if not self.samples:
            raise queue.Empty
        self.samples -= 1
        return object()

    def qsize(self) -> int:
        return self.samples


def test_the_share_of_the_window_waited_counts_every_blocked_take() -> None:
    clock = Clock()
    progress = need(batch=8, accumulation=1, token_budget=0, world_size=1, clock=clock)
    source = SlowQueue(clock)
    counted = Counted(source, progress)
    signals = TrainerSignals(progress, max_steps=100)
    assert signals.measure(clock.now).waited == 0.0  # the first window starts
    source.takes_s = 5.0
    with pytest.raises(queue.Empty):
        counted.get(timeout=5.0)  # TRL's poll on an empty queue: waiting too
    source.samples, source.takes_s = 1, 10.0
    counted.get(timeout=5.0)
    progress.stepped(1)
    progress.stepped(2)
    clock.now += 45.0  # training, not waiting
    measured = signals.measure(clock.now)
    assert measured.waited == pytest.approx(15.0 / 60.0)
    assert measured.remaining_s == pytest.approx(98 * 60.0 / 2)
    clock.now += 60.0  # a window without a step: its pace unknown
    assert signals.measure(clock.now) == type(measured)(0.0, None, 0.0)


def test_trls_dropped_stale_total_is_summed_over_its_logging_steps() -> None:
    clock = Clock()
    signals = TrainerSignals(need(8, 1, 0, 1, clock=clock), max_steps=10)
    signals.saw({"sample/dropped_stale_total": 3.0, "loss": 0.1})
    signals.saw({"loss": 0.1})
    signals.saw({"sample/dropped_stale_total": 2.0})
    assert signals.measure(clock.now).dropped_stale == 5.0


def test_without_its_configuration_there_is_no_scaler_and_a_job_lacking_a_secret_says_so(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from deploy.install import Install
    from deploy.plan import RunPlan
    from deploy.plan_jobs import scaler_config
    from deploy.scaler.config import Scaling
    from trainer_entry.scaling import start

    signals = TrainerSignals(need(8, 1, 0, 1, clock=Clock()), max_steps=10)
    assert start({}, signals, "http://127.0.0.1:9") is None  # a fixed fleet, plain TRL
    plan = RunPlan(run_name="r1", bucket="a/b", model="m", replicas=1, namespace="a",
                   install=Install("image", None), scale=Scaling(1, 2))  # fmt: skip
    env = {"ROLLOUT_SCALER": scaler_config(plan).to_json(), "HF_TOKEN": "hf_x"}
    assert start(env, signals, "http://127.0.0.1:9") is None
    assert "scaler: off: the scaler needs $HF_NETWORK_GROUP_PREFIX" in caplog.text
    assert "hf_x" not in caplog.text
