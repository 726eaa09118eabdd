"""Rollouts answered, per run, and the stale ones: what a whole answer's ``usage`` says.

A generation answer's ``usage`` (``usage``) feeds the prompt and cache figures and the cost
model, and counts the rollout for its run (by its name: the default run's is ``""``): one
answered rollout and its completion tokens. A rollout is **stale** when its adapter version had
left the window when it was answered (TRL unloaded it, or the window moved past it: the
registry's ``retired``): TRL drops such a sample as too stale (``sample/dropped_stale_total``),
so its tokens were generated for nothing. This is the waste the proxy sees, a lower bound: it
catches rollouts that outlive their version (a slow or hung replica, very long rollouts); the
waste TRL makes itself, a finished group dropped after waiting in TRL's queue, happens after the
proxy answered and shows in TRL's own counter only (``benchmarks/fleet/waste_study.py``), shown
beside this figure in the trainer's tracker (``trainer_entry.proxy_figures``). Streamed answers
carry no whole ``usage`` and are not counted (TRL never streams)."""

from __future__ import annotations

from collections.abc import Container, Iterable
from dataclasses import dataclass

from proxy.dataplane.usage import usage
from proxy.metrics.recorder import Metrics
from proxy.routing.cost import CostModel
from proxy.runs.run import DEFAULT, Run


@dataclass(slots=True)
class RolloutCounts:
    answered: int = 0
    tokens: int = 0  # completion tokens of the answered rollouts
    stale: int = 0
    stale_tokens: int = 0

    def add(self, tokens: int, stale: bool) -> None:
        self.answered += 1
        self.tokens += tokens
        if stale:
            self.stale += 1
            self.stale_tokens += tokens

    @property
    def stale_share(self) -> float | None:
        """The share of the generated tokens that went to stale rollouts."""
        return self.stale_tokens / self.tokens if self.tokens else None

    def as_dict(self) -> dict[str, float | int | None]:
        return {
            "answered": self.answered,
            "tokens": self.tokens,
            "stale": self.stale,
            "stale_tokens": self.stale_tokens,
            "stale_share": self.stale_share,
        }


class Rollouts:
    """The one owner of the per-run rollout counts."""

    def __init__(self, metrics: Metrics, costs: CostModel, retired: Container[str]) -> None:
        self._metrics = metrics
        self._costs = costs
        self._retired = retired
        self._runs: dict[str, RolloutCounts] = {DEFAULT.name: RolloutCounts()}

    def answered(
        self, data: bytes, status: int, replica: str, model: str | None, run: Run,
        decode_budget: int,
    ) -> None:  # fmt: skip
        """A whole answer from ``replica`` for ``model`` under ``run``."""
        counts = usage(data)
        if counts is None:
            return
        self._metrics.record_usage(replica, counts.prompt, counts.cached)
        if status != 200:
            return
        self._costs.observe(decode_budget, counts.completion)
        tally = self._runs.get(run.name)
        if tally is None:
            tally = self._runs[run.name] = RolloutCounts()
        tally.add(counts.completion, model in self._retired)

    def of(self, run: str) -> RolloutCounts:
        """``run``'s counts (zero for a run with none yet)."""
        return self._runs.get(run) or RolloutCounts()

    def runs(self, declared: Iterable[str]) -> dict[str, RolloutCounts]:
        """The default run's counts and each of ``declared``'s (a removed run's are dropped)."""
        names = [DEFAULT.name, *declared]
        for gone in set(self._runs) - set(names):
            del self._runs[gone]
        return {name: self.of(name) for name in names}
