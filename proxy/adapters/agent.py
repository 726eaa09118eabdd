"""One reconciler per replica, as a Kubernetes controller works: the spec (``spec``) is the
desired state, the agent observes its replica and acts on the difference, one command at a time,
in one task, and writes one thing: its replica's status (``status``), which routing and the
service read. It calls nothing back: whoever waits on it reads the status.

- Each command is the first runnable one of a plan made afresh (``Spec.plan``: unloads before
  loads, loads in version order; ``spec.runnable``: a load that needs a slot on a full replica
  waits for the unload that frees it). Whatever changed meanwhile (a load, an unload, a window
  that moved, a rollback) is acted on next; a missed wake-up, a duplicate or a restart is repaired
  by the next pass (level-triggered, idempotent).
- Observing: its answers to its own commands, and a listing (``/v1/models``) on a resync: at
  admission, every ``--info-refresh``, after the replica answered "does not exist" for a version
  it was believed to hold (``lost``).
- A failed command waits in a rate-limited queue (``retries``: per command, exponential backoff
  from ``RETRY``, capped) before it is tried again; a new listing clears it (the replica may hold
  something else now).
- After the plan, a version loaded and not yet probed is checked (``Check``: ``attest.check``);
  a mismatch loads it once more (unload, then load), a second one withholds the replica from it.
  What routing may use is published after every step and every round (``status.publish``).
- It acts while its replica is healthy, or being admitted: ``admit`` runs passes until one ends
  with nothing left and nothing changed meanwhile (True), or a command fails (False). A replica
  out of routing is skipped until its next admission (the service's intents count it
  unreachable from the pool's state).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from adapter_receiver.wire import shown
from proxy.adapters.attest.check import ServedPolicyCheck
from proxy.adapters.attest.verdict import Verdict
from proxy.adapters.carry import Carrier, LoadOutcome, describe
from proxy.adapters.registry import Command, Unload, Version
from proxy.adapters.retries import RetryQueue
from proxy.adapters.spec import Spec, runnable
from proxy.adapters.status import ReplicaStatus, Statuses
from proxy.clock import Backoff, TaskFailed, Timer
from proxy.fleet.info import max_loras
from proxy.fleet.pool import ReplicaPool
from proxy.fleet.replica import Health, Replica
from proxy.upstream.errors import UpstreamError

log = logging.getLogger("proxy.adapters")

RETRY = Backoff(first_s=0.5, max_s=30.0)  # a failed command on a routable replica
MAX_ADMISSION_PASSES = 8  # the window moving under an admission this often: try again later

Key = tuple[str, str, str]
Listing = Callable[[Replica], Awaitable[dict[str, str]]]


@dataclass(frozen=True, slots=True)
class Check:
    """A version loaded on the replica whose served policy is to be probed."""

    version: Version


Step = Command | Check


@dataclass(frozen=True, slots=True)
class Tools:
    """What every agent works with (the same for all of them)."""

    spec: Spec
    statuses: Statuses  # every replica's, read for what this one may serve
    carrier: Carrier
    check: ServedPolicyCheck
    pool: ReplicaPool
    listing: Listing  # reads the replica's models and info, returns its adapters
    waited: Callable[[float], None]  # a version's first wait here, from load to verdict
    failed: TaskFailed


class Agent:
    def __init__(self, replica: Replica, status: ReplicaStatus, tools: Tools) -> None:
        self.replica = replica
        self.status = status
        self._tools = tools
        self._clock = tools.carrier.clock
        self._wake = asyncio.Event()
        self.idle = asyncio.Event()  # a round ended with nothing to do (``service.settled``)
        self.idle.set()
        self._resync = True
        self._admissions: list[asyncio.Future[bool]] = []
        self._retries: RetryQueue[Key] = RetryQueue(RETRY)
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
        self.status.lost(name)
        self.publish()
        self.wake(resync=True)

    def publish(self) -> bool:
        """What routing may use of what the replica holds, now (requests waiting may go);
        True when it changed (the pool's followers were told)."""
        check, statuses = self._tools.check, self._tools.statuses
        changed = self.status.publish(lambda n, v, d: check.servable(n, v, d, statuses))
        if changed:
            self._tools.pool.refresh()
        return changed

    def parked_unloads(self) -> int:
        return sum(1 for key in self._retries.items() if key[0] == "unload")

    def checks_due(self) -> bool:
        return bool(self._tools.check.checks(self.status, self._tools.statuses))

    async def run(self) -> None:
        """Rounds for as long as the proxy runs; survives its own exceptions."""
        while True:
            await self._wake.wait()
            self._wake.clear()
            try:
                await self._round()
                self.publish()  # another replica's verdict may have changed what this one serves
            except Exception as exc:
                self._tools.failed("adapters", exc)
                self._answer(False)
            if not self._wake.is_set():
                self.idle.set()

    def _active(self) -> bool:
        replica = self.replica
        if self._tools.pool.get(replica.id) is not replica:
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
        self._tools.pool.note_error(
            self.replica, "the adapter window kept changing during admission"
        )
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
                listed = await self._tools.listing(self.replica)
            except UpstreamError as exc:
                self._resync = True
                self._tools.pool.note_error(self.replica, f"listing its adapters failed: {exc}")
                return False
            self.status.observe(listed)
            self._retries.clear()  # it may hold something else now: every command tried afresh
            self._reloaded.clear()
            self.publish()
        while self._active():
            step = self._next(admitting)
            if step is None:
                return admitting or not len(self._retries)
            self._carrying = carrying = asyncio.ensure_future(self._carry(step))
            try:
                ok = await carrying
            except asyncio.CancelledError:
                if not carrying.cancelled() or _cancelling():
                    raise  # the agent itself is cancelled (shutdown)
                self._resync = True  # given up midway (``left``): what it holds is unknown
                break
            if not ok and admitting:
                return False
        return False

    def _next(self, admitting: bool) -> Step | None:
        now, retries = self._clock.monotonic(), self._retries

        def ready(step: Step) -> bool:
            return admitting or retries.ready(_key(step), now)

        status, limit = self.status, max_loras(self.replica)
        free = None if limit is None else limit - len(status.paths)
        command = runnable(self._tools.spec.plan(status), free, ready)
        if command is not None:
            return command
        for version in self._tools.check.checks(status, self._tools.statuses):
            if ready(Check(version)):
                return Check(version)
        return None

    async def _carry(self, step: Step) -> bool:
        key, status = _key(step), self.status
        if isinstance(step, Check):
            return await self._check(step.version, key)
        if isinstance(step, Unload):
            ok = await self._tools.carrier.unload(self.replica, step.name)
            if ok:
                status.drop(step.name)
                self._loaded_at.pop(step.name, None)
            self._settle(key, ok, step.name)
            status.ended(step.name)
            return ok
        version = step.version
        outcome = await self._load(version, step.replace)
        ok = outcome.status == "ok"
        if ok:
            status.confirm(version, outcome.at, pushed=outcome.via == "push")
            self._loaded_at.setdefault(version.name, self._clock.monotonic())
        else:
            self._tools.pool.note_error(self.replica, describe(outcome, version.name))
        self._settle(key, ok, version.name)  # published first: a load answered is routable
        status.ended(version.name, (version, outcome))
        return ok

    def _settle(self, key: Key, ok: bool, name: str) -> None:
        """A step's end: what routing may use published, or the step waits for its retry."""
        if ok:
            self._retries.forget(key)
            self.publish()  # requests waiting for a version may go now
            return
        self._retries.failed(key, self._clock.monotonic())
        log.info("replica %s: %s of %s failed, retried later", self.replica.id, key[0],
                 shown(name))  # fmt: skip

    async def _check(self, version: Version, key: Key) -> bool:
        """Probe ``version``'s served policy; a first mismatch loads it once more."""
        check, name = self._tools.check, version.name
        found = await check.verify(self.replica, version, self._tools.statuses)
        if found is None:
            self._settle(key, False, name)
            return False
        if found is Verdict.PENDING:  # due again once another replica's answer is in
            self.status.judged(name, found)
            self._settle(key, True, name)
            return True
        if found is Verdict.MISMATCH and key not in self._reloaded:
            self._reloaded.add(key)  # unloaded here, the plan loads it again, then its check
            ok = await self._tools.carrier.unload(self.replica, name)
            if ok:
                self.status.drop(name)
            self._settle(key, ok, name)
            return ok
        if found is Verdict.MISMATCH:
            found = Verdict.WITHHELD
            check.withheld(self.replica, version)
        self.status.judged(name, found)
        loaded = self._loaded_at.pop(name, None)
        if loaded is not None:  # what this version's first requests here waited for
            self._tools.waited(self._clock.monotonic() - loaded)
        self._settle(key, True, name)
        return True

    async def _load(self, version: Version, replace: bool) -> LoadOutcome:
        carrier, spec = self._tools.carrier, self._tools.spec
        push = spec.take(version, self.replica)
        if push is None:
            push = carrier.push(version, [self.replica]).get(self.replica.id)
        deadline = spec.deadline(version, carrier)
        outcome = await carrier.deliver(self.replica, version, deadline, replace=replace, push=push)
        if outcome.pushed:
            self.status.pushed(version.name)  # its receiver keeps the bytes until an unload
        return outcome

    def _retry_later(self) -> None:
        """A wake-up when the first waiting command may be tried again."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        due = self._retries.due()
        if due is not None:
            delay = max(due - self._clock.monotonic(), 0.0)
            self._timer = self._clock.call_later(delay, self.wake)


def _key(step: Step) -> Key:
    if isinstance(step, Unload):
        return ("unload", step.name, "")
    version = step.version
    verb = "check" if isinstance(step, Check) else "load"
    return (verb, version.name, version.digest or version.where)


def _cancelling() -> bool:
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0
