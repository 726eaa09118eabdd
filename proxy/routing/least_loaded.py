"""Least-loaded: the candidate with the least estimated work in flight (``routing.cost``): the
proxy's own cost estimate plus what the replica reports, a replica that reports itself full last;
ties go to the earliest. Without cost estimates it is the fewest requests in flight."""

from __future__ import annotations

from proxy.routing.cost import measure
from proxy.routing.peek import Peek
from proxy.routing.policy import Decision, RouteKeys, RouteRequest, Snapshot


class LeastLoaded:
    name = "least_loaded"

    def route_keys(self, peek: Peek, model: str | None) -> RouteKeys:
        return (), None

    def select(self, snapshot: Snapshot, request: RouteRequest) -> Decision:
        candidates = snapshot.candidates
        loads = measure(candidates, request.cost)
        return Decision(candidates[loads.least()].id, "least_loaded")

    def stats(self) -> dict[str, int]:
        return {}
