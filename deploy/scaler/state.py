"""What the scaler remembers, kept in the bucket so a restarted trainer (HF Jobs running the
job again, a resume) goes on where it was: the decider's ``History``, its own launches of the
last hour, the launches not yet ready, the replicas it is retiring, the launches that failed, and
each replica's cache figure at the last decision.

One JSON file, written whole after every change through a temporary file and ``os.replace`` (a
reader sees the old file or the new one). A file that is missing or unreadable starts a fresh
state, said in one line; the Jobs API then rebuilds what matters for the bounds (the scaler's
own jobs, labelled, with their launch times: ``Scaler.adopt``), so losing the file never lets
the scaler launch past its hourly bound or forget a launch under way.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from deploy.scaler.decide import History

log = logging.getLogger("deploy.scaler")


@dataclass
class ScalerState:
    history: History = field(default_factory=History)
    launched: dict[str, float] = field(default_factory=dict)  # job id -> launch, of the hour
    pending: dict[str, float] = field(default_factory=dict)  # job id -> launch, not yet ready
    retiring: dict[str, float] = field(default_factory=dict)  # job id -> when its drain began
    settled: list[str] = field(default_factory=list)  # launches seen ready (or adopted ready)
    unmeasured: list[str] = field(default_factory=list)  # adopted launches: start-up unknown
    failed: int = 0  # launches cancelled for never becoming ready
    cached: dict[str, float] = field(default_factory=dict)  # replica id -> cached tokens then
    last: dict[str, Any] | None = None  # the last decision, as reported

    def as_data(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def of_data(cls, data: dict[str, Any]) -> ScalerState:
        history = {
            spec.name: _tuple(data["history"][spec.name])
            for spec in fields(History)
            if spec.name in data["history"]
        }
        return cls(
            history=History(**history),
            launched={str(k): float(v) for k, v in data["launched"].items()},
            pending={str(k): float(v) for k, v in data["pending"].items()},
            retiring={str(k): float(v) for k, v in data["retiring"].items()},
            settled=[str(job) for job in data["settled"]],
            unmeasured=[str(job) for job in data.get("unmeasured", [])],
            failed=int(data["failed"]),
            cached={str(k): float(v) for k, v in data["cached"].items()},
            last=data.get("last"),
        )


def _tuple(value: Any) -> Any:
    return tuple(value) if isinstance(value, list) else value


class StateFile:
    """The state at ``path`` (its directory made on first save)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    def load(self) -> ScalerState:
        try:
            text = self.path.read_text()
        except FileNotFoundError:
            return ScalerState()
        except OSError as exc:
            log.warning("scaler: cannot read %s (%s): starting from the Jobs API's view alone",
                        self.path, exc)  # fmt: skip
            return ScalerState()
        try:
            return ScalerState.of_data(json.loads(text))
        except (ValueError, KeyError, TypeError) as exc:
            log.warning("scaler: %s is not a scaler state (%s): starting from the Jobs API's "
                        "view alone", self.path, exc)  # fmt: skip
            return ScalerState()

    def save(self, state: ScalerState) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(state.as_data(), sort_keys=True))
        os.replace(tmp, self.path)


class MemoryState:
    """A state kept in memory only (tests; a scaler without a bucket)."""

    def __init__(self, state: ScalerState | None = None) -> None:
        self.state = state or ScalerState()

    def load(self) -> ScalerState:
        return ScalerState.of_data(json.loads(json.dumps(self.state.as_data())))

    def save(self, state: ScalerState) -> None:
        self.state = ScalerState.of_data(json.loads(json.dumps(state.as_data())))
