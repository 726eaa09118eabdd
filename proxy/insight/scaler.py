"""What the run's scaler last decided, as it reported it (``POST /admin/scaler``, from the
trainer job: ``deploy.scaler.report`` writes the document). Pure: the edge reads the body and
the clock and records the metric; this keeps the last report, checked and trimmed to the fields
it knows, for ``/proxy/status`` (``scaler``), ``top``, ``rollout-deploy status`` and the
``scaler_replicas`` gauge.

A report is refused (``ValueError`` naming the field) unless ``action`` is one of ``ACTIONS`` and
``replicas`` gives a whole count of at least 0 for each of ``STATES``; texts are cut to
``TEXT_MAX`` characters and the list of scaled jobs to ``SCALED_MAX`` entries, so a report never
grows the page without bound. Labels are the fixed ``ACTIONS`` and ``STATES``, never its text.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

ACTIONS = ("add", "retire", "hold")
STATES = ("wanted", "ready", "starting", "draining")
TEXT_MAX = 500
SCALED_MAX = 64
NUMBERS = ("waited", "dropped_stale", "failed_launches", "launches_last_hour", "count")


class ScalerReports:
    """The last report, and when it came (the proxy's monotonic clock)."""

    def __init__(self) -> None:
        self.last: dict[str, Any] | None = None
        self.received_at: float | None = None

    def take(self, body: Mapping[str, Any], at: float) -> str:
        """Keep ``body`` as the last report; its action (``ValueError`` if it is not one)."""
        action = body.get("action")
        if action not in ACTIONS:
            raise ValueError(f"action must be one of {', '.join(ACTIONS)} (got {action!r})")
        counts = body.get("replicas")
        if not isinstance(counts, Mapping):
            raise ValueError(f"replicas must be an object with {', '.join(STATES)}")
        replicas = {}
        for state in STATES:
            value = counts.get(state)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ValueError(f"replicas.{state} must be a whole number >= 0 (got {value!r})")
            replicas[state] = value
        kept: dict[str, Any] = {"action": action, "replicas": replicas}
        for key in ("asked", "reason", "held_back"):
            text = body.get(key)
            kept[key] = str(text)[:TEXT_MAX] if text is not None else None
        for key in NUMBERS:
            value = body.get(key)
            kept[key] = value if isinstance(value, int | float) and value is not True else None
        bounds = body.get("bounds")
        if isinstance(bounds, Mapping):
            kept["bounds"] = {
                key: value
                for key, value in bounds.items()
                if isinstance(key, str) and isinstance(value, int | float | None)
            }
        scaled = body.get("scaled")
        if isinstance(scaled, list):
            kept["scaled"] = [
                {k: str(v)[:TEXT_MAX] for k, v in entry.items() if k in ("name", "job", "state")}
                for entry in scaled[:SCALED_MAX]
                if isinstance(entry, Mapping)
            ]
        self.last, self.received_at = kept, at
        return str(action)

    def page(self, now: float) -> dict[str, Any] | None:
        """``/proxy/status``'s ``scaler``: the last report and its age (None: none came)."""
        if self.last is None or self.received_at is None:
            return None
        return {**self.last, "age_s": round(now - self.received_at, 1)}

    def replicas(self) -> dict[str, int]:
        """The fleet's counts as last reported, by state (empty before any report)."""
        return dict(self.last["replicas"]) if self.last is not None else {}
