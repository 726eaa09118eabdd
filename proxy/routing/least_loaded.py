"""Least-loaded: the candidate with the fewest requests in flight; ties go to the earliest."""

from __future__ import annotations

from collections.abc import Sequence

from proxy.routing.peek import Peek
from proxy.routing.policy import Candidate, Decision, RouteRequest, Snapshot


class LeastLoaded:
    name = "least_loaded"

    def route_keys(self, peek: Peek, model: str | None) -> tuple[int, ...]:
        return ()

    def select(self, snapshot: Snapshot, request: RouteRequest) -> Decision:
        return Decision(least_loaded(snapshot.candidates).id, "least_loaded")

    def stats(self) -> dict[str, int]:
        return {}


def least_loaded(candidates: Sequence[Candidate]) -> Candidate:
    return min(candidates, key=_inflight)


def _inflight(candidate: Candidate) -> int:
    return candidate.inflight
