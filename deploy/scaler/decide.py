"""The scaler's decider: from what limited the run in the last window, add a replica, retire
one, or hold. Pure: no I/O, no clock (the caller passes the time), no randomness; the fleet's
history goes in and comes back out (``History``), so a restarted caller resumes where it was.

What it reads (``Window``, one per evaluation, every ``Policy.window_s``):
- ``waited``: the share of the window the trainer spent waiting for samples (its own figure:
  the one signal that the generation side limits the step, whatever the proxy sees);
- ``verdict``: the proxy's advisor (``generation-bound``: the replicas are full; ``stale-waste``,
  ``client-concurrency-bound``: adding replicas does not help; None: no advice);
- the fleet: replicas ready, starting (launched, not yet routed) and draining;
- ``remaining_s``: how long the run has left at its current pace (None: unknown).

The rules, first that holds:
1. below the minimum (a replica died for good), or the budget or the maximum crossed: add up to
   the minimum, or retire down to the bound; bounds are never crossed by a decision;
2. pressure (``waited >= Policy.add_wait``, or ``generation-bound`` with ``waited`` above
   ``retire_wait``) held for ``sustain_s``: add one replica, unless one is still starting, the
   cooldown since the last change has not passed, the launches of the last hour reached their
   bound, a launch that never became ready failed lately (its back-off), the last add did not
   pay lately (its back-off, ``Policy.unpaid_backoff_s``: below), or the run ends before a new
   replica would pay: its start-up (the measured ``History.startup_s``) must be at most
   ``Policy.payback`` times the time the run has left;
3. slack (``waited <= Policy.retire_wait`` and the advice is not ``generation-bound``) held for
   ``sustain_s``, with no replica starting or draining: retire one (drained, then cancelled by
   the caller), not below the minimum, after the cooldown;
4. hold, saying which condition is building or what holds it back.
Whether an add paid is judged on the first window after it settled (the cooldown over, nothing
starting), from the trainer's wait: with the trainer's own time per step unchanged, a step lasts
that time / (1 - waited), so the step fell by 1 - (1 - before) / (1 - after). Under pressure
``before``, a replica added to N promises at most min(before, 1 / (N + 1)): the whole wait, or
its share of the generation. A fall below ``Policy.add_gain`` of that promise means the fleet
is not what limits the run (TRL's in-flight count caps what the replicas run at once, or the
trainer, or the prompts do): the replica stays (it may help some), but no add follows for
``unpaid_backoff_s``. Adds restoring the minimum are not judged.
Hysteresis: the two thresholds are apart (``add_wait`` > ``retire_wait``), a condition must hold
for ``sustain_s`` before it acts, and every change starts a cooldown of at least the start-up
time during which nothing builds (the figures then are partly the fleet before the change), so
the fleet does not flap. The cooldown is checked after the bounds (rule 1) and before rules 2
and 3. Cost: O(launches in the last hour) per call.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Literal

Action = Literal["add", "retire", "hold"]
HOUR_S = 3600.0
GENERATION_BOUND = "generation-bound"


@dataclass(frozen=True, slots=True)
class Policy:
    """The decider's thresholds (the product's defaults are sized for real runs: minutes)."""

    window_s: float = 60.0  # how often the caller evaluates, over what it measured since
    add_wait: float = 0.15  # the trainer waited this share of the window: generation limits it
    retire_wait: float = 0.02  # it waited at most this: the fleet has room
    sustain_s: float = 180.0  # a condition holds this long before it acts
    cooldown_s: float = 300.0  # after a change, at least this (and the start-up) before another
    payback: float = 0.5  # a replica is added only if its start-up <= payback x the time left
    startup_s: float = 300.0  # the start-up assumed until one is measured
    failed_backoff_s: float = 900.0  # after a launch that never became ready, no add this long
    add_gain: float = 0.5  # an add paid if the step fell by this share of what it promised
    unpaid_backoff_s: float = 3600.0  # after an add that did not pay, no add this long


@dataclass(frozen=True, slots=True)
class Bounds:
    """What the scaler never crosses: the replica range, the budget and the launch rate."""

    min_replicas: int
    max_replicas: int
    replica_per_h: float  # one replica job's price
    fixed_per_h: float = 0.0  # the rest of the run (trainer, proxy job)
    budget_per_h: float | None = None
    max_launches_per_h: int = 6

    def __post_init__(self) -> None:
        if not 1 <= self.min_replicas <= self.max_replicas:
            raise ValueError("the replica range must be 1 <= MIN <= MAX")

    def affordable(self, replicas: int) -> bool:
        if self.budget_per_h is None:
            return True
        return self.fixed_per_h + replicas * self.replica_per_h <= self.budget_per_h + 1e-9

    def ceiling(self) -> int:
        """The most replicas the range and the budget allow (at least the minimum)."""
        top = self.max_replicas
        while top > self.min_replicas and not self.affordable(top):
            top -= 1
        return top


@dataclass(frozen=True, slots=True)
class Window:
    at: float  # seconds, on the caller's clock
    waited: float  # share of the window the trainer waited for samples, 0..1
    ready: int
    starting: int = 0
    draining: int = 0
    verdict: str | None = None
    remaining_s: float | None = None


@dataclass(frozen=True, slots=True)
class History:
    """What the decider remembers between calls (returned updated with each decision)."""

    last_change_at: float | None = None
    launches: tuple[float, ...] = ()  # when each launch of the last hour went out
    startup_s: float | None = None  # measured: a launch's time to ready (the latest's weight .5)
    failed_at: float | None = None  # the last launch that never became ready
    pressure_since: float | None = None
    slack_since: float | None = None
    added: tuple[float, int] | None = None  # the last add, unjudged: the wait then, the fleet
    unpaid_at: float | None = None  # when the last add was judged not to have paid

    def started(self, seconds: float) -> History:
        """A launched replica became ready ``seconds`` after its launch."""
        known = self.startup_s
        estimate = seconds if known is None else 0.5 * known + 0.5 * seconds
        return replace(self, startup_s=estimate)

    def failed(self, at: float) -> History:
        """A launched replica never became ready (the caller cancelled it)."""
        return replace(self, failed_at=at)


@dataclass(frozen=True, slots=True)
class Decision:
    action: Action
    reason: str
    history: History = field(default_factory=History)
    count: int = 0  # replicas to add or retire (0 for hold)


def decide(window: Window, history: History, bounds: Bounds, policy: Policy) -> Decision:
    """The first rule that holds (module docstring)."""
    now = window.at
    cooling = _cooling(history, now, policy)
    history = _pressures(window, history, policy, cooling=cooling is not None)
    launches = tuple(t for t in history.launches if now - t < HOUR_S)
    history = replace(history, launches=launches)
    wanted = window.ready + window.starting  # what the fleet will be, draining ones aside
    ceiling = bounds.ceiling()
    if wanted < bounds.min_replicas:
        return _add(history, now, bounds.min_replicas - wanted, launches, bounds,
                    f"{wanted} replica(s) ready or starting, below the minimum of "
                    f"{bounds.min_replicas}")  # fmt: skip
    if wanted > ceiling:
        return _retire(history, now, wanted - ceiling,
                       f"{wanted} replicas cross the bound of {ceiling} "
                       f"({_bound_words(bounds)})")  # fmt: skip
    if cooling is not None:  # what happens meanwhile is the last change settling in
        return _hold(history, cooling)
    if history.added is not None and not window.starting:
        history = _judged(window, history, policy)
    if history.pressure_since is not None:
        held = now - history.pressure_since
        if held < policy.sustain_s:
            return _hold(history, f"generation limits the run for {held:.0f} s of the "
                                  f"{policy.sustain_s:.0f} s an add needs")  # fmt: skip
        blocked = _add_blocked(window, history, now, wanted, ceiling, launches, bounds, policy)
        if blocked is not None:
            return _hold(history, blocked)
        return _add(history, now, 1, launches, bounds,
                    f"the trainer waited {window.waited:.0%} of the last window for samples"
                    + (f" ({window.verdict})" if window.verdict else "")
                    + f" for {held:.0f} s", added=(window.waited, wanted))  # fmt: skip
    if history.slack_since is not None:
        held = now - history.slack_since
        if held < policy.sustain_s:
            return _hold(history, f"the fleet has had room for {held:.0f} s of the "
                                  f"{policy.sustain_s:.0f} s a retire needs")  # fmt: skip
        if wanted <= bounds.min_replicas:
            return _hold(history, f"the fleet has room, at its minimum of {bounds.min_replicas}")
        if window.starting or window.draining:
            return _hold(history, "a replica is starting or draining")
        return _retire(history, now, 1,
                       f"the trainer waited {window.waited:.0%} of the last window for samples "
                       f"for {held:.0f} s: the fleet has room")  # fmt: skip
    return _hold(history, f"the trainer waited {window.waited:.0%} of the last window: "
                          "between the thresholds")  # fmt: skip


def _pressures(window: Window, history: History, policy: Policy, *, cooling: bool) -> History:
    """Since when each condition holds (reset the moment it does not, and while the last
    change settles in: what is measured then is partly the fleet before it)."""
    bound = window.verdict == GENERATION_BOUND
    pressure = window.waited >= policy.add_wait or (bound and window.waited > policy.retire_wait)
    slack = window.waited <= policy.retire_wait and not bound
    pressure, slack = pressure and not cooling, slack and not cooling
    return replace(
        history,
        pressure_since=_since(history.pressure_since, window.at) if pressure else None,
        slack_since=_since(history.slack_since, window.at) if slack else None,
    )


def _judged(window: Window, history: History, policy: Policy) -> History:
    """The last add, judged on this window (module docstring): paid, or not since now."""
    assert history.added is not None
    before, fleet = history.added
    promised = min(before, 1 / (fleet + 1))
    fell = 1 - (1 - before) / max(1 - window.waited, 1e-9)
    paid = fell >= policy.add_gain * promised
    return replace(history, added=None, unpaid_at=None if paid else window.at)


def _since(began: float | None, now: float) -> float:
    return now if began is None else began


def _cooling(history: History, now: float, policy: Policy) -> str | None:
    if history.last_change_at is None:
        return None
    wait = max(policy.cooldown_s, history.startup_s or policy.startup_s)
    left = history.last_change_at + wait - now
    return f"cooling down {left:.0f} s more after the last change" if left > 0 else None


def _add_blocked(
    window: Window, history: History, now: float, wanted: int, ceiling: int,
    launches: tuple[float, ...], bounds: Bounds, policy: Policy,
) -> str | None:  # fmt: skip
    if wanted >= ceiling:
        return f"generation-bound, at the bound of {ceiling} replicas ({_bound_words(bounds)})"
    if window.starting:
        return f"generation-bound; {window.starting} replica(s) still starting"
    if len(launches) >= bounds.max_launches_per_h:
        return f"generation-bound; {len(launches)} launches in the last hour, the most allowed"
    if history.failed_at is not None and now - history.failed_at < policy.failed_backoff_s:
        return "generation-bound; the last launch never became ready: backing off"
    if history.unpaid_at is not None and now - history.unpaid_at < policy.unpaid_backoff_s:
        return (f"generation-bound, but the last add did not pay (the step fell less than "
                f"{policy.add_gain:.0%} of what a replica's share promised): the fleet is not "
                "what limits the run")  # fmt: skip
    startup = history.startup_s or policy.startup_s
    left = window.remaining_s
    if left is not None and startup > policy.payback * left:
        return (f"generation-bound, but a replica takes {startup:.0f} s to start and the run "
                f"has {left:.0f} s left: it would not pay")  # fmt: skip
    return None


def _bound_words(bounds: Bounds) -> str:
    budget = "" if bounds.budget_per_h is None else f", budget ${bounds.budget_per_h:.2f}/h"
    return f"range {bounds.min_replicas}..{bounds.max_replicas}{budget}"


def _add(
    history: History, now: float, count: int, launches: tuple[float, ...], bounds: Bounds,
    reason: str, added: tuple[float, int] | None = None,
) -> Decision:  # fmt: skip
    room = max(bounds.max_launches_per_h - len(launches), 0)
    count = min(count, room)
    if count <= 0:
        return _hold(history, f"{reason}; no launch left this hour")
    after = replace(
        history, last_change_at=now, launches=(*launches, *([now] * count)),
        pressure_since=None, slack_since=None, added=added,
    )  # fmt: skip
    return Decision("add", reason, after, count)


def _retire(history: History, now: float, count: int, reason: str) -> Decision:
    after = replace(history, last_change_at=now, pressure_since=None, slack_since=None)
    return Decision("retire", reason, after, count)


def _hold(history: History, reason: str) -> Decision:
    return Decision("hold", reason, history, 0)
