"""Round robin over the candidates, in pool order (a baseline)."""

from __future__ import annotations

from proxy.routing.peek import Peek
from proxy.routing.policy import Decision, RouteKeys, RouteRequest, Snapshot


class RoundRobin:
    name = "round_robin"

    def __init__(self) -> None:
        self._turn = 0

    def route_keys(self, peek: Peek, model: str | None) -> RouteKeys:
        return (), None

    def select(self, snapshot: Snapshot, request: RouteRequest) -> Decision:
        candidates = snapshot.candidates
        self._turn += 1
        return Decision(candidates[self._turn % len(candidates)].id, "round_robin")

    def stats(self) -> dict[str, int]:
        return {}
