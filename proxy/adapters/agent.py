"""One reconciler per replica, as a Kubernetes controller works: the registry is the desired
state, the agent observes its replica and acts on the difference, one command at a time, in
one task, the one writer of the replica's held record (``held.Held``, which routing reads).

- Each command is the first of a plan made afresh (``Registry.plan``): unloads before loads,
  loads in version order. Whatever changed meanwhile (a load, an unload, a window that moved, a
  rollback) is acted on next; a missed wake-up, a duplicate or a restart is repaired by the next
  pass (level-triggered, idempotent). Nothing is ordered by hand.
- Observing: its answers to its own commands, and a listing (``/v1/models``) on a resync: at
  admission, every ``--info-refresh``, after the replica answered "does not exist" for a version
  it was believed to hold (``lost``).
- A failed command is parked and retried after ``RETRY``; a parked unload is tried once more
  before a load that would overtake it (vLLM counts both against ``max_loras`` and evicts a live
  adapter when full). A load this replica already answered for an intent waits for the intent
  to end (kept, or rolled back: the service wakes every agent).
- After the plan, a version loaded and not yet probed is checked (``Check``: ``policy``); a
  mismatch loads it once more (unload, then load), a second one withholds the replica from it.
  What routing may use is published after every step and every round (``Held.publish``): a
  verdict on another replica can change it (when no replica agrees with the reference).
- It acts while its replica is healthy, or being admitted: ``admit`` runs passes until one ends
  with nothing left and nothing changed meanwhile (True), or a command fails (False). A replica
  out of routing is skipped (its intents count it unreachable) until its next admission.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol

from adapter_receiver.wire import shown
from proxy.adapters.carry import Carrier, Outcome, describe
from proxy.adapters.held import Held, Verdict
from proxy.adapters.intent import Intent
from proxy.adapters.policy import Found
from proxy.adapters.registry import Command, Load, Unload, Version
from proxy.clock import Backoff, Failed, Timer
from proxy.fleet.pool import ReplicaPool
from proxy.fleet.replica import Health, Replica
from proxy.upstream.errors import UpstreamError

log = logging.getLogger("proxy.adapters")

RETRY = Backoff(first_s=0.5, max_s=30.0)  # a failed command on a routable replica
MAX_ADMISSION_PASSES = 8  # the window moving under an admission this often: try again later

Key = tuple[str, str, str]


@dataclass(frozen=True, slots=True)
class Check:
    """A version loaded on the replica whose served policy is to be probed (``policy``)."""

    version: Version


Step = Command | Check


class Desired(Protocol):
    """What an agent asks of the fleet-wide side (the adapter service)."""

    def plan(self, held: Held) -> list[Command]: ...

    def checks(self, held: Held) -> list[Version]: ...

    async def verify(self, replica: Replica, version: Version) -> Found: ...

    def withheld(self, replica: Replica, version: Version) -> None: ...

    def ready(self, seconds: float) -> None: ...

    def servable(self, name: str, version: Version | None, verdict: Verdict | None) -> bool: ...

    def intent(self, name: str) -> Intent | None: ...

    def report(self, outcome: Outcome, version: Version) -> None: ...

    def carried(self, replica: Replica, name: str) -> None: ...

    def inactive(self, replica: Replica) -> None: ...

    def observed(self, replica: Replica) -> None: ...


class Agent:
    def __init__(
        self,
        replica: Replica,
        desired: Desired,
        carrier: Carrier,
        pool: ReplicaPool,
        listing: Callable[[Replica], Awaitable[dict[str, str]]],
        failed: Failed,
    ) -> None:
        self.replica = replica
        self.held = Held(replica)
        self._desired, self._carrier, self._pool = desired, carrier, pool
        self._listing = listing  # reads the replica's models and info, returns its adapters
        self._failed = failed
        self._wake = asyncio.Event()
        self.idle = asyncio.Event()  # a round ended with nothing to do (``service.settled``)
        self.idle.set()
        self._resync = True
        self._admissions: list[asyncio.Future[bool]] = []
        self._parked: dict[Key, tuple[int, float]] = {}  # command -> (failures, not before)
        self._retried: set[Key] = set()  # parked unloads tried again before a load
        self._reloaded: set[Key] = set()  # versions loaded once more after a probe mismatch
        self._loaded_at: dict[str, float] = {}  # a name loaded and not judged yet -> since when
        self._timer: Timer | None = None
        self._carrying: asyncio.Task[bool] | None = None  # the command under way

    def wake(self, *, resync: bool = False) -> None:
        self._resync = self._resync or resync
        self.idle.clear()
        self._wake.set()

    async def admit(self) -> bool:
        """Until the replica holds the whole window (True) or cannot be brought there."""
        future: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._admissions.append(future)
        self.wake(resync=True)
        return await future

    def left(self) -> None:
        """If the replica left routing (ejected, removed), the command under way there is given
        up: a hung replica holds no load of the fleet's. Readmission observes it afresh."""
        if self._carrying is not None and not self._carrying.done() and not self._active():
            self._carrying.cancel()

    def lost(self, name: str) -> None:
        """The replica answered "does not exist" for ``name``: it restarted unseen."""
        self.held.lost(name)
        self.publish()
        self.wake(resync=True)

    def publish(self) -> None:
        """What routing may use of what the replica holds, now (requests waiting may go)."""
        self.held.publish(self._desired.servable)
        self._pool.refresh()

    def parked_unloads(self) -> int:
        return sum(1 for key in self._parked if key[0] == "unload")

    async def run(self) -> None:
        """Rounds for as long as the proxy runs; survives its own exceptions."""
        while True:
            await self._wake.wait()
            self._wake.clear()
            try:
                await self._round()
                self.publish()  # another replica's verdict may have changed what this one serves
            except Exception as exc:
                self._failed("adapters", exc)
                self._answer(False)
            if not self._wake.is_set():
                self.idle.set()

    def _active(self) -> bool:
        replica = self.replica
        if self._pool.get(replica.id) is not replica:
            return False
        return replica.health is Health.HEALTHY or bool(self._admissions)

    async def _round(self) -> None:
        if not self._admissions:
            await self._pass(admitting=False)
            self._retry_later()
            return
        for _ in range(MAX_ADMISSION_PASSES):
            if not await self._pass(admitting=True):
                self._answer(False)
                return
            if not self._wake.is_set():  # nothing changed during the pass: in step
                self._answer(True)
                return
            self._wake.clear()
        self._pool.note_error(self.replica, "the adapter window kept changing during admission")
        self._answer(False)

    def _answer(self, ok: bool) -> None:
        for future in self._admissions:
            if not future.done():
                future.set_result(ok)
        self._admissions.clear()

    async def _pass(self, *, admitting: bool) -> bool:
        """Carry out the plan, re-planned after each command; True when nothing is left."""
        if self._active() and self._resync:
            self._resync = False
            try:
                self.held.observe(await self._listing(self.replica))
            except UpstreamError as exc:
                self._resync = True
                self._pool.note_error(self.replica, f"listing its adapters failed: {exc}")
                return False
            self._parked.clear()  # it may hold something else now: every command tried afresh
            self._reloaded.clear()
            self._desired.observed(self.replica)
            self.publish()
        while self._active():
            command = self._next(admitting)
            if command is None:
                return admitting or not self._parked
            self._carrying = carrying = asyncio.ensure_future(self._carry(command))
            try:
                ok = await carrying
            except asyncio.CancelledError:
                if not carrying.cancelled() or _cancelling():
                    raise  # the agent itself is cancelled (shutdown)
                self._resync = True  # given up midway (``left``): what it holds is unknown
                break
            if not ok and admitting:
                return False
        self._desired.inactive(self.replica)
        return False

    def _next(self, admitting: bool) -> Step | None:
        now, overtaken = self._carrier.clock.monotonic(), None
        for command in self._desired.plan(self.held):
            key = _key(command)
            if isinstance(command, Load):
                if overtaken is not None:  # a load must not overtake a parked unload untried
                    self._retried.add(_key(overtaken))
                    return overtaken
                intent = self._desired.intent(command.version.name)
                if intent is not None and intent.answered(self.replica, command.version):
                    continue  # what happens next is that intent's end
            parked = self._parked.get(key)
            if parked is None or parked[1] <= now or admitting:
                return command
            if isinstance(command, Unload) and overtaken is None and key not in self._retried:
                overtaken = command
        for version in self._desired.checks(self.held):
            parked = self._parked.get(_key(Check(version)))
            if parked is None or parked[1] <= now or admitting:
                return Check(version)
        return None

    async def _carry(self, command: Step) -> bool:
        key = _key(command)
        if isinstance(command, Check):
            return await self._check(command.version, key)
        if isinstance(command, Unload):
            ok = await self._carrier.unload(self.replica, command.name)
            if ok:
                self.held.drop(command.name)
                self._retried.discard(key)
                self._loaded_at.pop(command.name, None)
            name = command.name
        else:
            outcome = await self._load(command.version, command.replace)
            ok, name = outcome.status == "ok", command.version.name
            if ok:
                self.held.confirm(command.version, outcome.at, pushed=outcome.via == "push")
                self._loaded_at.setdefault(name, self._carrier.clock.monotonic())
                self._retried.clear()  # the next load tries a parked unload first again
            else:
                self._pool.note_error(self.replica, describe(outcome, name))
        self._settle(key, ok, name)
        self._desired.carried(self.replica, name)  # before the report: an undo starts after it
        if isinstance(command, Load):
            self._desired.report(outcome, command.version)
        return ok

    def _settle(self, key: Key, ok: bool, name: str) -> None:
        """A step's end: what routing may use published, or the step parked."""
        if ok:
            self._parked.pop(key, None)
            self.publish()  # requests waiting for a version may go now
            return
        fails = self._parked.get(key, (0, 0.0))[0] + 1
        self._parked[key] = (fails, self._carrier.clock.monotonic() + RETRY.delay(fails - 1))
        log.info("replica %s: %s of %s failed, retried later", self.replica.id, key[0],
                 shown(name))  # fmt: skip

    async def _check(self, version: Version, key: Key) -> bool:
        """Probe ``version``'s served policy; a first mismatch loads it once more."""
        found = await self._desired.verify(self.replica, version)
        if found is None:
            self._settle(key, False, version.name)
            return False
        if found == "mismatch" and key not in self._reloaded:
            self._reloaded.add(key)  # unloaded here, the plan loads it again, then its check
            ok = await self._carrier.unload(self.replica, version.name)
            if ok:
                self.held.drop(version.name)
            self._settle(key, ok, version.name)
            return ok
        if found == "mismatch":
            found = "withheld"
            self._desired.withheld(self.replica, version)
        self.held.judged(version.name, found)
        loaded = self._loaded_at.pop(version.name, None)
        if loaded is not None:  # what this version's first requests here waited for
            self._desired.ready(self._carrier.clock.monotonic() - loaded)
        self._settle(key, True, version.name)
        return True

    async def _load(self, version: Version, replace: bool) -> Outcome:
        carrier, intent = self._carrier, self._desired.intent(version.name)
        if intent is not None and not intent.version.same_files(version):
            intent = None
        push = intent.take_push(self.replica) if intent is not None else None
        if push is None:
            push = carrier.push(version, [self.replica]).get(self.replica.id)
        deadline = intent.deadline if intent is not None else carrier.deadline()
        outcome = await carrier.deliver(self.replica, version, deadline, replace=replace, push=push)
        if outcome.pushed:
            self.held.pushed(version.name)  # its receiver keeps the bytes until an unload
        return outcome

    def _retry_later(self) -> None:
        """A wake-up when the first parked command may be tried again."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._parked:
            clock = self._carrier.clock
            due = min(not_before for _, not_before in self._parked.values())
            self._timer = clock.call_later(max(due - clock.monotonic(), 0.0), self.wake)


def _key(command: Step) -> Key:
    if isinstance(command, Unload):
        return ("unload", command.name, "")
    version = command.version
    verb = "check" if isinstance(command, Check) else "load"
    return (verb, version.name, version.digest or version.where)


def _cancelling() -> bool:
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0
