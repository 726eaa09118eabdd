"""A line every ``EVERY_S`` seconds while a training step waits for its samples.

TRL's trainer takes scored samples from its rollout queue (rank 0's) and says nothing while the
queue is empty, so a step that waits for slow replicas (a CPU machine, a recipe sized for GPUs)
looked like a hang. Here rank 0 says, once a step has taken ``EVERY_S`` and again every
``EVERY_S`` until it ends, how far it is::

    step 1: 3 samples (412 tokens) received in 60 s of about 1,536 tokens a step (6 micro-batches
    of 256 tokens x 1 rank); waiting for rollouts from the replicas

(with ``--token-budget 0``: ``3 of 48 samples``). The need is TRL's nominal one: with a token
budget a micro-batch closes when its next sample does not fit, so a step may take a few tokens
less. Samples TRL then drops as stale count as received.

``Counted`` stands in for TRL's queue and tells ``Progress`` of every sample the trainer takes
and how long each take waited (TRL's own ``perf/rollout_wait_s`` is the same wait, per step);
``Progress`` keeps the step's count and the run's wait against an injected clock and words the
line (no I/O); ``report`` says it from a thread until told to stop. The scaler reads the wait
(``Progress.totals``: the share of each window the trainer waited for samples is what tells it
that generation limits the run, ``trainer_entry.scaling``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

EVERY_S = 30.0


class Queue(Protocol):
    def get(self, block: bool = True, timeout: float | None = None) -> Any: ...

    def qsize(self) -> int: ...


class Progress:
    """The step being assembled: its samples and tokens so far, and since when."""

    def __init__(
        self,
        samples: int,
        tokens: int,
        shape: str,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``samples``: TRL's nominal samples a step (with ``tokens`` 0: the need); ``tokens``:
        the micro-batches' token budgets of a step (0: none); ``shape``: how a step is made."""
        self.samples, self.tokens, self.shape, self.clock = samples, tokens, shape, clock
        self._lock = threading.Lock()
        self._step, self._received, self._received_tokens = 1, 0, 0
        self._since = clock()
        self._waited_s = 0.0  # the run's time blocked on the queue, every step's

    def waited(self, seconds: float) -> None:
        """The trainer was blocked ``seconds`` on one take from the queue."""
        with self._lock:
            self._waited_s += seconds

    def totals(self) -> tuple[float, int]:
        """The run's wait so far (seconds) and the steps ended."""
        with self._lock:
            return self._waited_s, self._step - 1

    def took(self, tokens: int) -> None:
        """The trainer took one sample of ``tokens`` tokens from the queue."""
        with self._lock:
            self._received += 1
            self._received_tokens += tokens

    def stepped(self, global_step: int) -> None:
        """Step ``global_step`` ended: the next one starts from nothing."""
        with self._lock:
            self._step, self._received, self._received_tokens = global_step + 1, 0, 0
            self._since = self.clock()

    def line(self, after_s: float) -> str | None:
        """What to say about the step under way once it has taken ``after_s``, else None."""
        with self._lock:
            elapsed = self.clock() - self._since
            if elapsed < after_s:
                return None
            if self.tokens:
                got = (
                    f"{self._received} samples ({self._received_tokens:,} tokens) received in "
                    f"{elapsed:.0f} s of about {self.tokens:,} tokens a step"
                )
            else:
                got = f"{self._received} of {self.samples} samples received in {elapsed:.0f} s"
            return (
                f"step {self._step}: {got} ({self.shape}); waiting for rollouts from the replicas"
            )


class Counted:
    """TRL's rollout queue, telling ``progress`` of every sample the trainer takes from it."""

    def __init__(self, queue: Queue, progress: Progress) -> None:
        self.queue, self.progress = queue, progress

    def get(self, block: bool = True, timeout: float | None = None) -> Any:
        began = self.progress.clock()
        try:  # an empty queue raises after ``timeout``: that wait counts too
            sample = self.queue.get(block, timeout)
        finally:
            self.progress.waited(self.progress.clock() - began)
        ids = getattr(sample, "input_ids", None)  # TRL's: a numpy array (no truth value)
        self.progress.took(0 if ids is None else len(ids))
        return sample

    def qsize(self) -> int:
        return self.queue.qsize()


def report(
    progress: Progress, stop: threading.Event, say: Callable[[str], None], every_s: float = EVERY_S
) -> None:
    """Every ``every_s`` until ``stop`` is set, the line for a step that has taken as long."""
    while not stop.wait(every_s):
        line = progress.line(every_s)
        if line is not None:
            say(line)


def need(
    batch: int,
    accumulation: int,
    token_budget: int,
    world_size: int,
    clock: Callable[[], float] = time.monotonic,
) -> Progress:
    """The ``Progress`` of steps of ``accumulation`` micro-batches on ``world_size`` ranks, each
    of ``batch`` samples or, with a ``token_budget``, of that many tokens a rank."""
    ranks = f"{world_size} rank{'s' if world_size > 1 else ''}"
    batches = f"{accumulation} micro-batch{'es' if accumulation > 1 else ''}"
    samples = batch * accumulation * world_size
    if token_budget:
        tokens = token_budget * accumulation * world_size
        return Progress(samples, tokens, f"{batches} of {token_budget:,} tokens x {ranks}", clock)
    return Progress(samples, 0, f"{batches} of {batch} samples x {ranks}", clock)
