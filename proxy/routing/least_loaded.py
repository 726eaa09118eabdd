"""Least-loaded: the candidate with the fewest requests in flight; ties go to the earliest."""

from __future__ import annotations

from collections.abc import Sequence

from proxy.routing.base import Candidate, Decision, RouteRequest


class LeastLoaded:
    name = "least_loaded"

    def select(self, candidates: Sequence[Candidate], request: RouteRequest) -> Decision | None:
        best = min(candidates, key=_inflight)
        return Decision(best.id, "least_loaded")


def _inflight(candidate: Candidate) -> int:
    return candidate.inflight
