"""The scaler in the trainer job (rank 0's process, the one that sees TRL's rollout queue and
holds the HF token): the trainer's figures it decides on, and its thread started and stopped
with training.

Only a run whose fleet sizes itself has one: ``deploy up --replica-count MIN..MAX`` puts its
configuration in the trainer job's environment (``deploy.scaler.runner``). A fixed fleet, or
plain TRL (no ``trainer_entry``), has none.

``TrainerSignals`` measures each window for the decider: ``waited``, the share of the window
the trainer was blocked on TRL's rollout queue (``trainer_entry.progress``: the one signal that
generation limits the step, whatever the proxy sees); ``remaining_s``, the steps left at the
window's pace (unknown until a step ends in it); and TRL's ``sample/dropped_stale_total`` summed
over its logging steps (reported beside: TRL's figure for the waste, not a reason to retire).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from typing import Any

from deploy.scaler.actuator import Measured
from deploy.scaler.runner import Runner, ScalerUnavailable, from_environment
from trainer_entry.progress import Progress

log = logging.getLogger("trainer_entry")
DROPPED_STALE = "sample/dropped_stale_total"


class TrainerSignals:
    """The trainer's figures per window (module docstring)."""

    def __init__(self, progress: Progress, max_steps: int) -> None:
        self.progress, self.max_steps = progress, max_steps
        self._lock = threading.Lock()
        self._dropped = 0.0
        self._last: tuple[float, float, int] | None = None  # when, waited so far, steps then

    def saw(self, logs: Mapping[str, Any]) -> None:
        """TRL logged ``logs`` (one logging step's figures)."""
        value = logs.get(DROPPED_STALE)
        if isinstance(value, int | float):
            with self._lock:
                self._dropped += float(value)

    def measure(self, now: float) -> Measured:
        waited, steps = self.progress.totals()
        with self._lock:
            last, self._last = self._last, (now, waited, steps)
            dropped = self._dropped
        if last is None or now <= last[0]:
            return Measured(0.0, None, dropped)
        span = now - last[0]
        share = min(max((waited - last[1]) / span, 0.0), 1.0)
        done = steps - last[2]
        remaining = (self.max_steps - steps) * span / done if done > 0 else None
        return Measured(share, remaining, dropped)


def start(
    environ: Mapping[str, str],
    signals: TrainerSignals,
    proxy_url: str,
    proxy_token: str | None = None,
) -> Runner | None:
    """The scaler's thread when the run's fleet sizes itself (None otherwise, or when the job
    lacks what it needs: said in one line, and training goes on with the fleet as it is)."""
    try:
        scaler = from_environment(environ, signals, proxy_url, proxy_token)
    except ScalerUnavailable as exc:
        log.error("scaler: off: %s", exc)
        return None
    if scaler is None:
        return None
    runner = Runner(scaler)
    runner.start()
    return runner
