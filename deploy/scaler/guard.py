"""What the actuator lets a decision do, whatever the decider said: the bounds are the
actuator's to keep, not the decider's alone (a decider with a bug, or one a test forces to flap,
must not cross them). Pure.

- add: at most the ceiling (``Bounds.ceiling``: the range's maximum, lowered to what the budget
  pays) less every live replica job, the draining ones included (they bill until they end), and
  at most the launches the last hour has left (``Bounds.max_launches_per_h``, counted from the
  actuator's own record of its launches, which a restart rebuilds from the Jobs API);
- retire: at most the ready replicas (only those are drained), never below the minimum counting
  what is ready or starting.

And which replica a retire takes: the one whose loss costs the least cached prefix, i.e. whose
prefix cache served the fewest prompt tokens over the last window (its share of the routing
keys, weighted by what their prompts reuse); then the fewest requests in flight; then the
newest (the highest index). As the simulator's elastic fleet chooses.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from deploy.scaler.decide import HOUR_S, Bounds, Decision
from deploy.scaler.fleet import Fleet, Member


def recent(launches: Iterable[float], now: float) -> list[float]:
    """The launches of the last hour."""
    return sorted(at for at in launches if now - at < HOUR_S)


def admitted(
    decision: Decision, fleet: Fleet, bounds: Bounds, launches: Sequence[float], now: float
) -> tuple[int, str | None]:
    """How many replicas the decision may add or retire now, and, when fewer than it asked,
    why (one line)."""
    if decision.action == "add":
        room = bounds.ceiling() - len(fleet.live)
        left = bounds.max_launches_per_h - len(recent(launches, now))
        allowed = max(min(decision.count, room, left), 0)
        if allowed >= decision.count:
            return allowed, None
        if left < decision.count and left <= room:
            return allowed, f"{bounds.max_launches_per_h} launches an hour at most"
        return allowed, (
            f"{len(fleet.live)} replica job(s) live, the bound is {bounds.ceiling()} (range "
            f"{bounds.min_replicas}..{bounds.max_replicas}"
            + ("" if bounds.budget_per_h is None else f", budget ${bounds.budget_per_h:.2f}/h")
            + ")"
        )
    if decision.action == "retire":
        spare = fleet.wanted - bounds.min_replicas
        allowed = max(min(decision.count, spare, fleet.ready), 0)
        if allowed >= decision.count:
            return allowed, None
        if spare < decision.count:
            return allowed, f"the fleet would fall below its minimum of {bounds.min_replicas}"
        return allowed, f"only {fleet.ready} replica(s) ready to drain"
    return 0, None


def least_loss(fleet: Fleet, cached: Mapping[str, float]) -> Member | None:
    """The ready replica to retire (module docstring); ``cached``: the prompt tokens each
    proxy replica's cache served over the last window, by replica id."""
    ready = [member for member in fleet.members if member.ready and member.replica is not None]

    def loss(member: Member) -> tuple[float, int, int]:
        replica = member.replica
        assert replica is not None
        return (cached.get(replica.id, 0.0), replica.inflight, -member.job.index)

    return min(ready, key=loss, default=None)
