"""The fleet's spec, as each replica's agent reads it: the plan for one replica, the deadline a
TRL load set for a version, the pushes started for it, and the one ordering rule that is real.

The adapter service is its one writer (``service``); the agents only read it and compare it
with their replica's status (``status``), as a Kubernetes controller compares an object's spec
with its status. It holds:
- the registry (``registry``: the versions wanted, pure), and what else decides a plan: whether a
  source is configured and its first scan applied (then anything else a replica holds is a
  leftover to unload), the versions a previous process left that nothing vouches for yet
  (``state.Adopted``: not replayed), and whether the proxy is closing (unloads only);
- each TRL load's deadline, by version (``deadline``): a replica whose mount lags retries until
  then; a replay or a preload takes the carrier's own;
- the pushes a TRL load started for the replicas that need the bytes (read once for all): each
  agent takes its replica's (``take``); what is left is cancelled when the load ends.

The ordering rule (``runnable``): vLLM counts a replica's loaded adapters against its
``max_loras`` and evicts a live one when a load finds it full, so a load that needs a new slot
does not run while the replica is full and the plan still has an unload to run there (a failed
one waiting for its retry included): the unload that frees the slot goes first. A load with room,
or one that replaces a name in place, never waits for an unload.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from proxy.adapters.carry import Carrier
from proxy.adapters.push import Pushed
from proxy.adapters.registry import Command, Load, Registry, Unload, Version
from proxy.adapters.state import Adopted
from proxy.adapters.status import ReplicaStatus
from proxy.fleet.replica import Replica

PushKey = tuple[str, str]  # (name, digest or where): one version's files


def push_key(version: Version) -> PushKey:
    return (version.name, version.digest or version.where)


class Spec:
    def __init__(self, registry: Registry, has_source: bool) -> None:
        self.registry = registry
        self.adopted = Adopted()  # what a previous process left (``state``)
        self.has_source = has_source
        self.source_seen = False  # the source's first scan has been applied
        self.closing = False  # no load starts any more
        self._deadlines: dict[PushKey, float] = {}
        self._pushes: dict[PushKey, dict[str, asyncio.Task[Pushed]]] = {}

    def saw_source(self) -> None:
        """The source's first scan was applied: leftovers on the replicas can be told apart."""
        self.source_seen = True

    def close(self) -> None:
        """The proxy is closing: plans unload, and load nothing more."""
        self.closing = True

    def plan(self, status: ReplicaStatus) -> list[Command]:
        """The commands that bring the replica ``status`` describes to the wanted versions."""
        manage = self.has_source and self.source_seen
        commands = self.registry.plan(status, manage_unknown=manage, loads=not self.closing)
        hides = self.adopted.hides
        return [c for c in commands if not (isinstance(c, Load) and hides(c.version.name))]

    def owes(self, status: ReplicaStatus, name: str) -> bool:
        """The replica's plan has a command for ``name``."""
        return any(_name(c) == name for c in self.plan(status))

    # -- a TRL load's deadline and pushes (the service sets them for the load's lifetime) -----

    def loading(
        self, version: Version, deadline: float, pushes: dict[str, asyncio.Task[Pushed]]
    ) -> None:
        key = push_key(version)
        self._deadlines[key] = deadline
        self._pushes[key] = pushes

    def loaded(self, version: Version) -> None:
        """The load ended: its deadline no longer applies; the pushes not taken are cancelled."""
        key = push_key(version)
        self._deadlines.pop(key, None)
        for task in self._pushes.pop(key, {}).values():
            task.cancel()

    def deadline(self, version: Version, carrier: Carrier) -> float:
        return self._deadlines.get(push_key(version)) or carrier.deadline()

    def take(self, version: Version, replica: Replica) -> asyncio.Task[Pushed] | None:
        """``replica``'s push of ``version`` started by its load, once (None: none started)."""
        pushes = self._pushes.get(push_key(version))
        return pushes.pop(replica.id, None) if pushes is not None else None


def runnable(
    plan: list[Command], free: int | None, ready: Callable[[Command], bool]
) -> Command | None:
    """The plan's first command that may run now: ``ready`` (its retry's backoff has passed),
    and, for a load that needs a new slot while the replica has ``free`` slots (None: its
    ``max_loras`` is unknown), not behind an unload still to run on a full replica (the
    module's ordering rule). Pure."""
    unloads_left = any(isinstance(c, Unload) for c in plan)
    for command in plan:
        if not ready(command):
            continue
        full = free is not None and free <= 0
        if isinstance(command, Load) and not command.replace and unloads_left and full:
            continue  # the unload that frees its slot goes first
        return command
    return None


def _name(command: Command) -> str:
    return command.version.name if isinstance(command, Load) else command.name
