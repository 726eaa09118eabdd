"""The runs one proxy serves (declared ones; the default run is ``run.DEFAULT``): their names,
weights, pause gates and shares of ``max_loras``.

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
import copy
import math
from collections.abc import Awaitable, Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from proxy.errors import DomainError
from proxy.runs.names import BadRunName, check_run_name, run_of, scoped, unscope_text, unscoped
from proxy.runs.run import DEFAULT, Control, R, Run

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


class DeclaredRun(Run):
    """A run declared with ``--runs`` or the admin API (``run.Run``'s module docstring says what
    a run decides). Its table (``Runs``) owns it: its weight, its gate, its share of the
    table's total weight."""

    def __init__(self, name: str, weight: float, table: Runs) -> None:
        self.name = name
        self.weight = weight
        self._table = table
        self._open = asyncio.Event()
        self._open.set()
        self.pauses = 0  # pauses answered, for status
        self.requests = 0  # answered under /runs/<run>/ (gone with the run when it is removed)

    def __repr__(self) -> str:
        return f"DeclaredRun({self.name!r}, {self.weight:g})"

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

    def replica_name(self, name: str) -> str:
        return scoped(self.name, name)

    def own_name(self, name: str) -> str | None:
        return unscoped(self.name, name)

    def target(self, path_qs: str) -> str:
        return path_qs.removeprefix(f"/runs/{self.name}")

    def answer(self, body: bytes) -> bytes:
        return unscope_text(body, self.name)

    def admission(self, timeout_s: float) -> Awaitable[None] | None:
        return None if not self.paused else self._admitted(timeout_s)

    async def _admitted(self, timeout_s: float) -> None:
        """Until the gate opens; ``RunPaused`` after ``timeout_s``."""
        try:
            async with asyncio.timeout(timeout_s):
                await self._open.wait()
        except TimeoutError:
            raise RunPaused(self.name, timeout_s) from None

    def share(self, amount: int) -> int:
        """Its weighted share of ``amount``, at least 1 (a run removed keeps its last one)."""
        return self._table.share_of(self, amount)

    def over_share(self, held: int, max_loras: int) -> str | None:
        share = self.share(max_loras)
        if held + 1 <= share:
            return None
        return (
            f"run {self.name} holds {held} adapters and its share of max_loras is {share} "
            f"({max_loras} per replica over {len(self._table)} runs by weight): unload one "
            "first (TRL: a lower --max-staleness), or start the replicas with a larger "
            "--max-loras"
        )

    def server_info(self, info: dict[str, Any]) -> dict[str, Any]:
        """Its share of ``max_loras``: what TRL checks its staleness on."""
        info = copy.deepcopy(info)
        config = info.get("vllm_config")
        lora = config.get("lora_config") if isinstance(config, dict) else None
        if isinstance(lora, dict) and isinstance(lora.get("max_loras"), int):
            lora["max_loras"] = self.share(lora["max_loras"])
        return info

    def models(self, listing: dict[str, Any]) -> dict[str, Any]:
        """The base model, then its adapters under its own names."""
        data: list[dict[str, Any]] = [listing["data"][0]]
        for entry in listing["data"][1:]:
            own = self.own_name(str(entry.get("id")))
            if own is not None:
                data.append({**entry, "id": own})
        return {**listing, "data": data}

    async def control(self, path: str, query: str, fleet: Control[R]) -> R:
        """Its own gate only: the replicas and the other runs go on."""
        if path == "/pause":
            self.pause()
        else:
            self.resume()
        status = "paused" if path == "/pause" else "resumed"
        return fleet.answer({"status": status, "run": self.name, "fleet": "generating"})


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
    """The declared runs. ``follow(f)``: ``f(self)`` is told after every declaration of a new
    run and every removal (the metrics keep each run's series, from its declaration on)."""

    def __init__(self, weights: dict[str, float] | None = None) -> None:
        self._runs: dict[str, DeclaredRun] = {}
        self._followers: list[Callable[[Runs], None]] = []
        for name, weight in (weights or {}).items():
            self.declare(name, weight)

    def follow(self, follower: Callable[[Runs], None]) -> None:
        """``follower(self)`` now and after every change of the names."""
        self._followers.append(follower)
        follower(self)

    def names(self) -> list[str]:
        return list(self._runs)

    def _changed(self) -> None:
        for follower in self._followers:
            follower(self)

    def __bool__(self) -> bool:
        return bool(self._runs)

    def __iter__(self) -> Iterator[DeclaredRun]:
        return iter(tuple(self._runs.values()))

    def __len__(self) -> int:
        return len(self._runs)

    def __contains__(self, name: object) -> bool:
        return name in self._runs

    def get(self, name: str) -> DeclaredRun:
        run = self._runs.get(name)
        if run is None:
            raise UnknownRun(name, self._runs)
        return run

    def of_adapter(self, name: str) -> Run:
        """The run a replica-side adapter name belongs to: a declared run's, else the default
        run's (a removed run's names too)."""
        declared = run_of(name)
        found = self._runs.get(declared) if declared is not None else None
        return found if found is not None else DEFAULT

    def declare(self, name: str, weight: float = 1.0) -> DeclaredRun:
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
            run = self._runs[name] = DeclaredRun(name, weight, self)
            self._changed()
        run.weight = weight
        return run

    def remove(self, name: str) -> DeclaredRun:
        run = self.get(name)
        del self._runs[name]
        run.resume()  # nothing waits on a run that is gone
        self._changed()
        return run

    def weights(self) -> dict[str, float]:
        return {run.name: run.weight for run in self._runs.values()}

    def share(self, name: str, amount: int) -> int:
        """``name``'s weighted share of ``amount`` (a replica's ``max_loras``, the queue's
        size), at least 1."""
        return self.share_of(self.get(name), amount)

    def share_of(self, run: DeclaredRun, amount: int) -> int:
        """``run``'s weighted share of ``amount`` among the declared runs (its own weight alone
        counted when it was removed), at least 1."""
        total = sum(r.weight for r in self._runs.values())
        if run.name not in self._runs:
            total += run.weight
        return max(1, math.floor(amount * run.weight / total))


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
