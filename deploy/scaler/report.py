"""A decision as the scaler tells it: one document for the proxy (``POST /admin/scaler``, shown
on ``/proxy/status`` as ``scaler``, by ``top`` and ``rollout-deploy status``, counted in the
proxy's metrics) and one line for the trainer's log. Pure.

The document: ``action`` (add, retire, hold), ``count`` (the replicas it added or began to
retire), ``reason`` (the decider's), ``held_back`` (why the guard let fewer through, or null),
``replicas`` (wanted, ready, starting, draining, after the decision), ``bounds``, the trainer's
``waited`` share and TRL's ``dropped_stale`` total, ``failed_launches``,
``launches_last_hour``, and ``scaled``: each live replica job the scaler launched (name, job id,
state). No secret: names, counts and reasons only.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from deploy.jobs import JobView
from deploy.scaler.decide import HOUR_S, Bounds, Decision
from deploy.scaler.fleet import Fleet, Member
from deploy.scaler.state import ScalerState

if TYPE_CHECKING:
    from deploy.scaler.actuator import Measured


def report(
    decision: Decision,
    done: int,
    held_back: str | None,
    fleet: Fleet,
    measured: Measured,
    state: ScalerState,
    bounds: Bounds,
    now: float,
    launched: Sequence[JobView] = (),
) -> dict[str, Any]:
    """The decision's document (module docstring); ``fleet``: as the decision left it, but for
    the jobs it just ``launched``, which the Jobs API lists from the next pass."""
    starting = fleet.starting + len(launched)
    return {
        "at": now,
        "action": decision.action if done or decision.action == "hold" else "hold",
        "asked": decision.action,
        "count": done,
        "reason": decision.reason,
        "held_back": held_back,
        "replicas": {
            "wanted": fleet.ready + starting,
            "ready": fleet.ready,
            "starting": starting,
            "draining": fleet.draining,
        },
        "bounds": {
            "min": bounds.min_replicas,
            "max": bounds.max_replicas,
            "ceiling": bounds.ceiling(),
            "budget_per_h": bounds.budget_per_h,
            "max_launches_per_h": bounds.max_launches_per_h,
        },
        "waited": round(measured.waited, 4),
        "dropped_stale": measured.dropped_stale,
        "failed_launches": state.failed,
        "launches_last_hour": sum(1 for at in state.launched.values() if now - at < HOUR_S),
        "scaled": [_scaled(member) for member in fleet.live if member.job.scaled]
        + [{"name": job.name, "job": job.id, "state": "starting"} for job in launched],
    }


def _scaled(member: Member) -> dict[str, str]:
    state = "draining" if member.draining else "ready" if member.ready else "starting"
    return {"name": member.job.name, "job": member.job.id, "state": state}


def describe(doc: dict[str, Any]) -> str:
    """The log's line for a decision document."""
    replicas = doc["replicas"]
    counts = (
        f"ready {replicas['ready']}, starting {replicas['starting']}, draining "
        f"{replicas['draining']}"
    )
    action = doc["action"]
    asked = doc["asked"]
    head = "hold" if action == "hold" else f"{action} {doc['count']}"
    line = f"{head}: {doc['reason']} ({counts}; the trainer waited {doc['waited']:.0%})"
    if doc["held_back"]:
        line += f"; the guard let {doc['count']} {asked} through: {doc['held_back']}"
    if doc.get("dropped_stale"):
        line += f"; TRL dropped {doc['dropped_stale']:.0f} stale sample(s) so far"
    return line
