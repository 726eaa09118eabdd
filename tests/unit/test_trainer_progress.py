"""While a training step waits for its samples, rank 0 says how far it is every
``progress.EVERY_S`` (``trainer_entry.progress``): a CPU run sized for GPUs waited 15 minutes
for step 1 without a word. Driven by a fake clock and a queue of the test's own."""

from __future__ import annotations

import queue
import threading
from dataclasses import dataclass

import numpy as np
import pytest

from trainer_entry.progress import Counted, need, report


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@dataclass
class Sample:
    input_ids: np.ndarray  # as TRL 1.16's rollout samples carry them (no truth value)


def test_a_step_waiting_longer_than_the_interval_is_said_with_its_tokens() -> None:
    clock = FakeClock()
    progress = need(batch=8, accumulation=6, token_budget=256, world_size=1, clock=clock)
    samples: queue.Queue[Sample] = queue.Queue()
    counted = Counted(samples, progress)
    for size in (100, 60, 40):
        samples.put(Sample(np.arange(size, dtype=np.int64)))
        counted.get(timeout=1)
    clock.now += 29.0
    assert progress.line(after_s=30) is None  # a step under way for less: nothing to say
    clock.now += 2.0
    assert progress.line(after_s=30) == (
        "step 1: 3 samples (200 tokens) received in 31 s of about 1,536 tokens a step "
        "(6 micro-batches of 256 tokens x 1 rank); waiting for rollouts from the replicas"
    )
    assert counted.qsize() == 0


def test_a_step_that_ended_starts_the_count_again() -> None:
    clock = FakeClock()
    progress = need(batch=4, accumulation=2, token_budget=0, world_size=2, clock=clock)
    progress.took(10)
    progress.stepped(global_step=1)
    progress.took(12)
    clock.now += 45
    assert progress.line(after_s=30) == (
        "step 2: 1 of 16 samples received in 45 s (2 micro-batches of 4 samples x 2 ranks); "
        "waiting for rollouts from the replicas"
    )


def test_the_reporter_says_the_line_until_stopped() -> None:
    clock = FakeClock()
    progress = need(batch=8, accumulation=1, token_budget=256, world_size=1, clock=clock)
    clock.now += 60  # the step has waited a minute already
    said: list[str] = []
    stop = threading.Event()
    spoke = threading.Event()

    def say(line: str) -> None:
        said.append(line)
        stop.set()  # once is enough: stop the reporter after its first line
        spoke.set()

    reporter = threading.Thread(target=report, args=(progress, stop, say, 0.01))
    reporter.start()
    assert spoke.wait(5)
    reporter.join(5)
    assert not reporter.is_alive()
    assert len(said) == 1 and said[0].startswith("step 1: 0 samples (0 tokens) received in 60 s")


@pytest.mark.parametrize("sample", [object(), Sample(np.array([], dtype=np.int64))])
def test_a_sample_without_tokens_counts_as_a_sample(sample: object) -> None:
    progress = need(batch=1, accumulation=1, token_budget=0, world_size=1, clock=FakeClock())
    items: queue.Queue[object] = queue.Queue()
    items.put(sample)
    assert Counted(items, progress).get(timeout=1) is sample
    assert (progress.line(after_s=0) or "").startswith("step 1: 1 of 1 samples received")
