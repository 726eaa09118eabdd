"""The runs one proxy serves: their names, weights, pause gates and shares of ``max_loras``.

Declared with ``--runs NAME[=WEIGHT],...`` (weight 1 when omitted) or the admin API, at most
``MAX_RUNS`` of them (every per-run label and map is bounded by this). The table is the one
owner of each run's state:

- ``weight``: its share of each replica's ``max_loras`` adapters,
  ``share(max_loras) = max(1, floor(max_loras * weight / total weight))``, of the proxy's wait
  queue (the same rule over ``--queue-size``), and of the proxy's in-flight slots whenever
  runs wait for them (``proxy.dataplane.fair``: work-conserving, so an idle run's slots are
  used by the others).
- the pause gate: TRL's ``/runs/<run>/pause`` closes it, ``resume`` opens it. While it is
  closed, that run's NEW generation requests wait at the proxy (at most the queue timeout; then
  503); its running requests go on, and other runs and the replicas are untouched.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from proxy.errors import DomainError
from proxy.runs.names import BadRunName, check_run_name

MAX_RUNS = 32
MAX_WEIGHT = 1000.0


class UnknownRun(DomainError, LookupError):
    """A ``/runs/<run>/`` no one declared (the edge answers 404 with the known ones)."""

    reason = "unknown_run"
    param = "run"

    def __init__(self, run: str, known: Iterable[str]) -> None:
        names = ", ".join(sorted(known)) or "none"
        super().__init__(f"no run {run!r} on this proxy (runs: {names}); declare it with --runs")
        self.run = run


class RunPaused(DomainError):
    """A paused run's new request waited the whole queue timeout (answered 503)."""

    reason = "run_paused"

    def __init__(self, run: str, timeout_s: float) -> None:
        super().__init__(f"run {run} stayed paused for {timeout_s:g} s (its weight sync did not "
                         "resume); retry shortly")  # fmt: skip


class OverShare(DomainError):
    """A load that would make a run hold more adapters than its share (answered 400)."""

    reason = "run_share"
    param = "lora_name"


@dataclass(eq=False, slots=True)
class Run:
    name: str
    weight: float = 1.0
    _open: asyncio.Event = field(default_factory=asyncio.Event)
    pauses: int = 0  # pauses answered, for status
    requests: int = 0  # answered under /runs/<run>/ (gone with the run when it is removed)

    def __post_init__(self) -> None:
        self._open.set()

    @property
    def paused(self) -> bool:
        return not self._open.is_set()

    def pause(self) -> None:
        if not self.paused:
            self.pauses += 1
        self._open.clear()

    def resume(self) -> None:
        self._open.set()

    def answered(self) -> None:
        self.requests += 1

    async def admitted(self, timeout_s: float) -> bool:
        """Until the run is not paused (True), or False after ``timeout_s``."""
        if not self.paused:
            return True
        try:
            async with asyncio.timeout(timeout_s):
                await self._open.wait()
        except TimeoutError:
            return False
        return True


def parse_runs(spec: str) -> dict[str, float]:
    """``a=2,b`` -> {"a": 2.0, "b": 1.0}; ValueError naming what is wrong."""
    runs: dict[str, float] = {}
    for part in (p.strip() for p in spec.split(",")):
        if not part:
            continue
        name, sep, raw = part.partition("=")
        name = name.strip()
        try:
            check_run_name(name)
        except BadRunName as exc:
            raise ValueError(str(exc)) from None
        weight = 1.0
        if sep:
            try:
                weight = float(raw)
            except ValueError:
                raise ValueError(f"run {name!r}: weight {raw.strip()!r} is not a number") from None
        check_weight(name, weight)
        if name in runs:
            raise ValueError(f"run {name!r} is declared twice")
        runs[name] = weight
    if len(runs) > MAX_RUNS:
        raise ValueError(f"{len(runs)} runs declared; at most {MAX_RUNS}")
    return runs


def check_weight(name: str, weight: float) -> None:
    if not (math.isfinite(weight) and 0 < weight <= MAX_WEIGHT):
        raise ValueError(f"run {name!r}: weight must be > 0 and at most {MAX_WEIGHT:g}")


class Runs:
    def __init__(self, weights: dict[str, float] | None = None) -> None:
        self._runs: dict[str, Run] = {}
        for name, weight in (weights or {}).items():
            self.declare(name, weight)

    def __bool__(self) -> bool:
        return bool(self._runs)

    def __iter__(self) -> Iterator[Run]:
        return iter(tuple(self._runs.values()))

    def __len__(self) -> int:
        return len(self._runs)

    def __contains__(self, name: object) -> bool:
        return name in self._runs

    def get(self, name: str) -> Run:
        run = self._runs.get(name)
        if run is None:
            raise UnknownRun(name, self._runs)
        return run

    def declare(self, name: str, weight: float = 1.0) -> Run:
        """Add a run, or change its weight; ValueError when the name, weight or count is bad."""
        try:
            check_run_name(name)
        except BadRunName as exc:
            raise ValueError(str(exc)) from None
        check_weight(name, weight)
        run = self._runs.get(name)
        if run is None:
            if len(self._runs) >= MAX_RUNS:
                raise ValueError(f"this proxy already serves {MAX_RUNS} runs, the most it may")
            run = self._runs[name] = Run(name, weight)
        run.weight = weight
        return run

    def remove(self, name: str) -> Run:
        run = self.get(name)
        del self._runs[name]
        run.resume()  # nothing waits on a run that is gone
        return run

    def weights(self) -> dict[str, float]:
        return {run.name: run.weight for run in self._runs.values()}

    def share(self, name: str, amount: int) -> int:
        """``name``'s weighted share of ``amount`` (a replica's ``max_loras``, the queue's
        size), at least 1."""
        total = sum(run.weight for run in self._runs.values())
        return max(1, math.floor(amount * self.get(name).weight / total))


@dataclass(frozen=True, slots=True)
class RunView:
    """One run as ``/metrics`` and ``/proxy/status`` show it."""

    name: str
    weight: float
    paused: bool
    pauses: int
    adapters: int  # adapter versions the fleet holds for it
    share: int | None  # of each replica's max_loras (None: no replica reported it yet)
    requests: int  # requests answered under /runs/<run>/
    inflight: int  # the proxy's slots its requests hold (its weighted share when others wait)
    queued: int  # its requests waiting for a slot
    # The advisor's verdict on this run (``proxy.insight.advisor.advise_run``, as a dict).
    advice: dict[str, object] | None = None
    warning: str | None = None  # its share is short of TRL's default need (``runs.staleness``)

    def as_dict(self) -> dict[str, object]:
        return {
            "weight": self.weight,
            "paused": self.paused,
            "pauses": self.pauses,
            "adapters": self.adapters,
            "max_loras_share": self.share,
            "requests": self.requests,
            "inflight": self.inflight,
            "queued": self.queued,
            "advice": self.advice,
            "warning": self.warning,
        }
