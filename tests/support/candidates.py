"""Fake routing candidates for policy tests: plain records of what ``routing.policy`` reads."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Report:
    """A replica's own load report (``policy.Reported``)."""

    saturated: bool = False
    foreign: float = 0.0


@dataclass
class Fake:
    """A replica as a policy sees it (``policy.Candidate``)."""

    id: str
    inflight: int = 0
    cost: float = 0.0  # below inflight: each request counts 1 (the policy takes the larger)
    reported: Report | None = None
