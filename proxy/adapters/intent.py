"""A load of one version across the fleet, all or nothing (TRL's load, the watcher's preload).

It waits for one outcome from each of its ``targets`` (the replicas routable when it was made;
one that leaves routing first counts as ``unreachable``: it gets the window on readmission), up
to its deadline: one that has not answered by then counts as unreachable too (``overdue``). An
unreachable one readmitted in time answers still; while every target is unreachable the answer
waits for that, or the deadline (``complete``).
Then the service keeps the version, or rolls the registry back and waits until every target
left holding something else than the rollback wants has carried it out (``undo``): the answer
comes after the undo, as before. Its pushes start at once for every target that needs the bytes
(read once for all); each agent takes its replica's. ``then_unload``: TRL unloaded the name while
it loaded; the unload follows the load's end, in the order they arrived.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from proxy.adapters.carry import Outcome
from proxy.adapters.push import Pushed
from proxy.adapters.registry import Version
from proxy.clock import Clock, Timer
from proxy.fleet.replica import Replica
from proxy.metrics.recorder import Metrics


@dataclass(eq=False, slots=True)
class Intent:
    version: Version
    previous: Version | None  # what the name was served as before (an in-place replace)
    targets: tuple[Replica, ...]
    deadline: float  # the carrier's clock: mount lag is waited for until then
    started: float  # perf_counter, for the fleet load's duration
    done: asyncio.Future[list[Outcome]]
    pushes: dict[str, asyncio.Task[Pushed]] = field(default_factory=dict)
    outcomes: dict[str, Outcome] = field(default_factory=dict)
    then_unload: bool = False
    undo: set[str] | None = None  # rolled back: the replicas still to carry the rollback out
    timer: Timer | None = None  # the deadline's (``overdue``)
    expired: bool = False  # the deadline passed

    def record(self, outcome: Outcome) -> bool:
        """Keep ``outcome`` (the first for its replica, unless that was ``unreachable``: a
        replica readmitted in time answers still); True once the load can be answered."""
        if outcome.replica in self.targets:
            kept = self.outcomes.get(outcome.replica.id)
            if kept is None or kept.status == "unreachable":
                self.outcomes[outcome.replica.id] = outcome
        return self.complete()

    def complete(self) -> bool:
        """Every target has answered, and one took the version, or one refused it, or the
        deadline passed: with every target unreachable (a proxy upstream restarting, the whole
        fleet ejected a moment) it waits for a readmitted one until then."""
        if self.undo is not None or not all(r.id in self.outcomes for r in self.targets):
            return False
        return self.expired or any(o.status != "unreachable" for o in self.outcomes.values())

    def expire(self, clock: Clock, seconds: float, overdue: Callable[[Intent], None]) -> None:
        """``overdue`` is called with this intent in ``seconds`` unless it has finished."""
        self.timer = clock.call_later(seconds, lambda: overdue(self))

    def overdue(self) -> list[Replica]:
        """The deadline passed: each target that has not answered (a hung replica, one whose
        load or push stalls) counts as unreachable, as if it had left routing; returned. Its
        agent carries the load on: routing waits there until it holds the version."""
        self.expired = True
        late = [r for r in self.targets if r.id not in self.outcomes]
        for replica in late:
            self.outcomes[replica.id] = Outcome(replica, "unreachable", None, 0)
        return late

    def answered(self, replica: Replica, version: Version) -> bool:
        """``replica`` has answered for this version (its next move waits for the end); one
        that was unreachable may load it yet."""
        kept = self.outcomes.get(replica.id)
        return (
            kept is not None and kept.status != "unreachable" and version.same_files(self.version)
        )

    @property
    def ok(self) -> bool:
        return all(o.status in ("ok", "unreachable") for o in self.outcomes.values())

    def take_push(self, replica: Replica) -> asyncio.Task[Pushed] | None:
        return self.pushes.pop(replica.id, None)

    def ordered(self) -> list[Outcome]:
        return [self.outcomes[r.id] for r in self.targets if r.id in self.outcomes]

    def finish(self, metrics: Metrics) -> None:
        """Counted, and answered with the targets' outcomes."""
        outcomes, seconds = self.ordered(), time.perf_counter() - self.started
        metrics.record_fleet_load(seconds, "ok" if self.ok else "failed")
        paths = {o.via for o in outcomes if o.attempts and o.status == "ok"}
        if self.ok and paths:
            metrics.push.record_sync(paths.pop() if len(paths) == 1 else "mixed", seconds)
        for o in outcomes:
            if o.attempts:
                metrics.record_adapter_load(o.replica.id, o.status, o.attempts, o.seconds)
        if self.timer is not None:
            self.timer.cancel()
        if not self.done.done():
            self.done.set_result(outcomes)

    def cancel_pushes(self) -> None:
        for task in self.pushes.values():
            task.cancel()
        self.pushes.clear()
