"""A load of one version across the fleet, all or nothing (TRL's load, the watcher's preload),
completed as a pure function of the replicas' statuses and its own deadline.

It is made for the replicas routable when it began (``targets``), with each one's command count
for the name then (``begun``): a target's outcome is the first load of these files its agent
carried out after that (``status.ReplicaStatus.condition``); nothing is reported to it.
``settle`` reads the statuses each time any of them changes (the service's watch) and says
whether the load can be answered:

- a target that has not answered yet counts as ``unreachable`` while it is out of routing (it
  gets the window on readmission; readmitted in time, its outcome still counts) and once the
  deadline passed (``expired``: a hung replica, one whose load or push stalls; its agent carries
  the load on, and routing waits there until it holds the version);
- a load whose version is no longer wanted as these files (TRL unloaded the name, or a later load
  replaced them) is superseded: the targets that have not answered count as ``superseded``
  (its unload is only a change of the plan: nothing is loaded only to be unloaded);
- it can be answered once every target has an outcome, and one of them took the version, or
  refused it, or the deadline passed, or it was superseded: while every target is unreachable (a
  proxy upstream restarting, the whole fleet ejected a moment) it waits for one to come back
  until then.

A load that failed (a refusal, a mount that never caught up) is rolled back by the service, and
answered once every target that owed a command for the name after the rollback has carried one
out, or left routing (``undone``). Pure: no I/O, no clock, no callbacks.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Container
from dataclasses import dataclass, field

from proxy.adapters.carry import LoadOutcome
from proxy.adapters.registry import Version
from proxy.adapters.status import ReplicaStatus, Statuses
from proxy.fleet.replica import Replica

Counts = dict[str, tuple[ReplicaStatus | None, int]]  # replica id -> (its status, count then)


@dataclass(eq=False, slots=True)
class Intent:
    version: Version
    previous: Version | None  # what the name was served as before (an in-place replace)
    targets: tuple[Replica, ...]
    begun: Counts  # each target's status and command count for the name when it began
    deadline: float  # the carrier's clock: mount lag is waited for until then
    started: float  # perf_counter, for the fleet load's duration
    done: asyncio.Future[list[LoadOutcome]]
    outcomes: dict[str, LoadOutcome] = field(default_factory=dict)
    expired: bool = False  # the deadline passed
    undo: Counts | None = None  # rolled back: the replicas still to carry the rollback out

    @staticmethod
    def counts(statuses: Statuses, replicas: tuple[Replica, ...], name: str) -> Counts:
        """Each of ``replicas``' status and command count for ``name`` now."""
        found = {r.id: statuses.get(r.id) for r in replicas}
        return {rid: (s, s.count(name) if s is not None else 0) for rid, s in found.items()}

    def settle(self, statuses: Statuses, routable: Container[str], superseded: bool) -> bool:
        """Record the targets' outcomes as the statuses show them; True once the load can be
        answered (see the module docstring)."""
        for replica in self.targets:
            kept = self.outcomes.get(replica.id)
            if kept is not None and kept.status != "unreachable":
                continue
            found = _since(statuses, self.begun, replica.id, self.version)
            if found is not None:
                self.outcomes[replica.id] = found
            elif superseded:
                self.outcomes[replica.id] = LoadOutcome(replica, "superseded", None, 0)
            elif self.expired or replica.id not in routable:
                self.outcomes[replica.id] = LoadOutcome(replica, "unreachable", None, 0)
            else:
                self.outcomes.pop(replica.id, None)  # routable again: its answer is awaited
        if len(self.outcomes) < len(self.targets):
            return False
        live = any(o.status != "unreachable" for o in self.outcomes.values())
        return self.expired or superseded or live

    def expire(self) -> None:
        """The deadline passed (``settle`` counts every target not answered unreachable)."""
        self.expired = True

    def late(self) -> list[Replica]:
        """The targets that had not answered when the deadline passed (``unreachable``)."""
        late = []
        for replica in self.targets:
            outcome = self.outcomes.get(replica.id)
            if outcome is not None and outcome.status == "unreachable":
                late.append(replica)
        return late

    @property
    def ok(self) -> bool:
        return all(o.status in ("ok", "unreachable", "superseded") for o in self.outcomes.values())

    def rolled_back(self, statuses: Statuses, owing: list[Replica]) -> None:
        """Rolled back: ``owing`` (routable targets whose plans now have a command for the name)
        are to carry it out before the answer."""
        self.undo = self.counts(statuses, tuple(owing), self.version.name)

    def undone(
        self, statuses: Statuses, routable: Container[str], owes: Callable[[ReplicaStatus], bool]
    ) -> bool:
        """Every replica that owed the rollback has carried out a command for the name since,
        left routing, or owes nothing any more."""
        assert self.undo is not None
        name = self.version.name
        for rid, (then, count) in list(self.undo.items()):
            status = statuses.get(rid)
            if status is None or status is not then or rid not in routable:
                del self.undo[rid]  # gone, added anew or out of routing: readmission replays
            elif status.count(name) > count or not owes(status):
                del self.undo[rid]
        return not self.undo

    def ordered(self) -> list[LoadOutcome]:
        return [self.outcomes[r.id] for r in self.targets if r.id in self.outcomes]


def _since(statuses: Statuses, begun: Counts, rid: str, version: Version) -> LoadOutcome | None:
    """The outcome of the first load of ``version`` on ``rid`` since the intent began."""
    status = statuses.get(rid)
    if status is None:
        return None
    then, count = begun.get(rid, (None, 0))
    found = status.condition(version, count if status is then else 0)
    return found.outcome if found is not None else None
