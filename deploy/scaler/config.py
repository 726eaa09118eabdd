"""What the scaler in the trainer job is told, decided by ``deploy up`` before anything runs.

``Scaling`` is the plan's part (``deploy up --replica-count MIN..MAX``, ``--budget-per-h``,
``--max-launches-per-h``, ``--scale-policy``); ``ScalerConfig`` adds what the trainer job
cannot know by itself: the run and namespace, the replicas' spec as ``deploy up`` launches them
(replica 0's, secret names only: ``JobSpec.numbered`` makes job ``i`` of it), the prices, the
launch's ready bound (``--ready-timeout``) and where the scaler keeps its state in the bucket.
``deploy up`` writes it as JSON into the trainer job's environment (``SCALER_ENV``): it holds no
secret, so ``--dry-run`` shows it as it is. The values of the secrets a replica job needs (the
HF token, the run's replica key) and the proxy's admin key are secrets of the trainer job, read
from its environment by name (``deploy.scaler.wiring``), never written here.

Why the spec travels in the trainer's environment rather than being rebuilt there from the
plan: it is the exact spec ``deploy up`` launched (the same function, the same wheel path,
replica flags, image and group), with nothing for a second code path to get wrong; it needs no
file in the bucket to be written before the trainer starts nor read through a lagging mount;
and a rehearsal or a retried trainer job gets it with the rest of the job's spec.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from deploy.scaler.decide import Bounds, Policy
from deploy.specs import JobSpec

SCALER_ENV = "ROLLOUT_SCALER"
DRAIN_TIMEOUT_S = 600.0  # a retiring replica's in-flight requests finish within this, else cut
MAX_LAUNCHES_PER_H = 6
STATE_FILE = "scaler.json"


@dataclass(frozen=True)
class Scaling:
    """What ``deploy up`` asks of the scaler: the replica range, the budget, the launch rate,
    the decider's thresholds, and how long a retiring replica may drain."""

    min_replicas: int
    max_replicas: int
    budget_per_h: float | None = None
    max_launches_per_h: int = MAX_LAUNCHES_PER_H
    policy: Policy = field(default_factory=Policy)
    drain_timeout_s: float = DRAIN_TIMEOUT_S

    def describe(self) -> str:
        """One line: the range, the budget, the launch rate and every threshold."""
        budget = "no budget" if self.budget_per_h is None else f"budget ${self.budget_per_h:.2f}/h"
        policy = ", ".join(
            f"{key} {value:g}" + (" s" if key in DURATIONS else "")
            for key, value in policy_settings(self)
        )
        return (
            f"{self.min_replicas}..{self.max_replicas} replicas, {budget}, at most "
            f"{self.max_launches_per_h} launches an hour; {policy}"
        )


def policy_settings(scaling: Scaling) -> list[tuple[str, float]]:
    """(name, value) of every threshold ``--scale-policy`` sets, as it names them: the
    decider's ``Policy`` fields without their ``_s`` (``window``, ``add_wait``, ...) and
    ``drain_timeout``."""
    pairs = [(spec.name, float(getattr(scaling.policy, spec.name))) for spec in fields(Policy)]
    pairs.append(("drain_timeout_s", scaling.drain_timeout_s))
    return [(name.removesuffix("_s"), value) for name, value in pairs]


def policy_names() -> dict[str, str]:
    """``--scale-policy``'s names -> the field each sets (``window`` -> ``window_s``)."""
    names = [spec.name for spec in fields(Policy)] + ["drain_timeout_s"]
    return {name.removesuffix("_s"): name for name in names}


# The names that are durations (their field ends in ``_s``); every other one is a share or ratio.
DURATIONS = frozenset(name for name, field in policy_names().items() if field.endswith("_s"))


@dataclass(frozen=True)
class ScalerConfig:
    """Everything the scaler in the trainer job needs but its secrets (module docstring)."""

    scaling: Scaling
    run_name: str
    namespace: str
    replica: JobSpec  # replica 0's spec as ``deploy up`` launches it
    replica_per_h: float  # one replica job's price (0: its flavor has no price here)
    fixed_per_h: float  # the run's other jobs: trainer nodes, proxy job
    ready_timeout_s: float  # a launch not routed within this is cancelled (--ready-timeout)
    state_dir: str  # in the bucket, where a restarted trainer finds the scaler's state
    port: int = 8000  # where a replica serves, inside the run's network group

    @property
    def state_path(self) -> str:
        return f"{self.state_dir.rstrip('/')}/{STATE_FILE}"

    def bounds(self) -> Bounds:
        scaling = self.scaling
        return Bounds(
            scaling.min_replicas,
            scaling.max_replicas,
            self.replica_per_h,
            self.fixed_per_h,
            scaling.budget_per_h,
            scaling.max_launches_per_h,
        )

    def to_json(self) -> str:
        data = asdict(self)
        data["replica"] = self.replica.as_data()
        return json.dumps(data, sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> ScalerConfig:
        """The config ``to_json`` wrote; ``ValueError`` naming what is wrong otherwise."""
        try:
            data: dict[str, Any] = json.loads(text)
            scaling = dict(data["scaling"])
            scaling["policy"] = Policy(**scaling["policy"])
            return cls(
                scaling=Scaling(**scaling),
                run_name=str(data["run_name"]),
                namespace=str(data["namespace"]),
                replica=JobSpec.of_data(data["replica"]),
                replica_per_h=float(data["replica_per_h"]),
                fixed_per_h=float(data["fixed_per_h"]),
                ready_timeout_s=float(data["ready_timeout_s"]),
                state_dir=str(data["state_dir"]),
                port=int(data["port"]),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(
                f"${SCALER_ENV} is not the scaler's configuration as deploy up writes it "
                f"({type(exc).__name__}: {exc}): launch the run with the same version of "
                "rollout-deploy as the trainer runs"
            ) from None
