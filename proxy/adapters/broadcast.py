"""Carrying out adapter commands on replicas: retries for lagging mounts, rollback, replay.

Per replica, a load that fails with vLLM's ``No adapter found`` (the replica's bucket mount has
not caught up yet; vLLM answers 404) is retried at short intervals, from ``retry_min_s`` growing
by half each time to at most ``retry_max_s``, until the deadline; every other error is final.
A replica that cannot be reached is ejected (the health loop reconciles it when it comes back)
instead of failing the fleet.

A client's load answers only when every routable replica has the version: 200, or an error after
rolling back the replicas that took it; a mount that never caught up answers 504 (never 404:
TRL reads 404 as "runtime LoRA updating is off"). Loads of one name are coalesced: a load the
watcher already started (or finished) is what the client's request waits for.

With a ``Pusher`` and a version whose files the proxy can read, the bytes go first: pushed to
every replica that needs them at once (``push``), each replica loading from its local copy as
soon as its own push is done. A replica whose push fails (no receiver, refused, unreachable, or
vLLM cannot find the copy) loads from the mount path as above: per replica, counted by cause
(``on_pushed``). A rolled-back push is unloaded too, so the receiver deletes its copy.

A load from the mount path first waits, within the same deadline, until ``mounted(version,
deadline)`` says the bucket holds the version: with ``--adapters-local`` TRL saves on the
trainer's disk and the mirror (``mirror``) copies each version into the bucket behind the sync,
so a replica without a receiver must not be sent the bucket path before that copy has landed.
A version the mirror gave up on (or that did not land in time) is ``lagging``, as a mount that
never caught up.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import orjson

from adapter_receiver.wire import shown
from proxy.adapters.push import Pushed, Pusher
from proxy.adapters.registry import Load, Registry, Unload, Version
from proxy.clock import Clock
from proxy.fleet.pool import ReplicaPool
from proxy.fleet.replica import Replica
from proxy.upstream.client import Reply, UpstreamClient
from proxy.upstream.errors import TRANSPORT_ERRORS, is_local

# An unload is one call between two engine steps; a replica that takes longer is ejected (and
# readmitted in step), so that no later load waits on it for long.
UNLOAD_TIMEOUT_S = 30.0

log = logging.getLogger("proxy.adapters")

Status = Literal["ok", "lagging", "failed", "unreachable"]
# mounted(version, deadline): until the bucket holds the version (True), or not by the deadline.
Mounted = Callable[[Version, float], Awaitable[bool]]


@dataclass(frozen=True, slots=True)
class Outcome:
    replica: Replica
    status: Status
    reply: Reply | None = None
    attempts: int = 1
    seconds: float = 0.0
    via: Literal["push", "mount"] = "mount"


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """From ``AdapterSettings`` (where the defaults live)."""

    deadline_s: float
    min_s: float
    max_s: float


class Broadcaster:
    def __init__(
        self,
        pool: ReplicaPool,
        client: UpstreamClient,
        registry: Registry,
        clock: Clock,
        retry: RetryPolicy,
        pusher: Pusher | None = None,
        on_pushed: Callable[[Replica, Pushed], None] | None = None,
        mounted: Mounted | None = None,
    ) -> None:
        self.pool = pool
        self.client = client
        self.registry = registry
        self.clock = clock
        self.retry = retry
        self.pusher = pusher
        self._on_pushed = on_pushed or (lambda replica, pushed: None)
        self._mounted = mounted
        # Waits for the unloads a load must not overtake on a replica (the service's Unloads).
        self.before_load: Callable[[Replica, int | None], Awaitable[None]] = _no_unloads

    async def load_on(
        self,
        replica: Replica,
        version: Version,
        deadline: float,
        *,
        replace: bool = False,
        path: str | None = None,
    ) -> Outcome:
        """Load ``version`` on one replica, retrying while its mount lags.

        ``replace``: the name is already loaded there with other or unknown files; load in place
        (it stays served throughout), then reset the replica's prefix cache, which vLLM keys by
        adapter name and would otherwise serve KV computed with the old weights.
        ``path``: a pushed copy on the replica's own disk (never retried: it is there or lost);
        else the mount path.
        """
        target = path or version.where
        body = orjson.dumps(
            {"lora_name": version.name, "lora_path": target, "load_inplace": replace}
        )
        delay, attempts, started = self.retry.min_s, 0, self.clock.monotonic()
        while True:
            attempts += 1
            try:
                reply = await self.client.call(replica, "POST", "/v1/load_lora_adapter", body=body)
            except TRANSPORT_ERRORS as exc:
                if is_local(exc):  # the proxy's own limit: a failed load, no replica to blame
                    log.warning("adapter load on %s not sent: %s", replica.id, exc)
                    return Outcome(replica, "failed", None, attempts)
                self._eject(replica, f"unreachable during adapter load ({type(exc).__name__})")
                return Outcome(replica, "unreachable", None, attempts)
            if reply.status == 200:
                if replace:
                    await self._reset_cache(replica)
                self.confirm(replica, version, target)
                return Outcome(replica, "ok", reply, attempts, self.clock.monotonic() - started)
            if reply.status == 400 and b"already been loaded" in reply.body and not replace:
                # The replica has this name from before this proxy knew: replace it in place.
                replace = True
                body = orjson.dumps(
                    {"lora_name": version.name, "lora_path": target, "load_inplace": True}
                )
                continue
            if reply.status != 404 or b"No adapter found" not in reply.body:
                return Outcome(replica, "failed", reply, attempts)
            if path is not None or self.clock.monotonic() + delay > deadline:
                elapsed = self.clock.monotonic() - started
                return Outcome(replica, "lagging", reply, attempts, elapsed)
            await self.clock.sleep(delay)
            delay = min(delay * 1.5, self.retry.max_s)

    async def _reset_cache(self, replica: Replica) -> None:
        try:
            await self.client.call(replica, "POST", "/reset_prefix_cache")
        except TRANSPORT_ERRORS:
            log.warning("replica %s: prefix cache reset after an in-place load failed", replica.id)

    async def unload_on(self, replica: Replica, name: str) -> bool:
        """Unload ``name``; True when the replica no longer has it (404 counts)."""
        body = orjson.dumps({"lora_name": name})
        try:
            reply = await self.client.call(
                replica, "POST", "/v1/unload_lora_adapter", body=body, timeout_s=UNLOAD_TIMEOUT_S
            )
        except TRANSPORT_ERRORS as exc:
            if not is_local(exc):
                self._eject(replica, f"unreachable during adapter unload ({type(exc).__name__})")
            return False
        if reply.status in (200, 404):
            self.dropped(replica, name)
            return True
        log.warning(
            "replica %s: unload of %s answered HTTP %d", replica.id, shown(name), reply.status
        )
        return False

    # What a replica holds is kept twice, by two owners: the registry keeps which version
    # record it holds and where it loaded it from (to plan and roll back), the pool keeps the
    # name and path routing and ``/v1/models`` read (``Replica.adapters``). These two methods
    # are the only writers of both (``admit`` aligns the registry with the replica's listing).

    def confirm(self, replica: Replica, version: Version, at: str | None = None) -> None:
        """``replica`` holds ``version``, loaded from ``at`` (default: the mount path)."""
        self.registry.mark_loaded(replica.id, version, at)
        self.pool.adapter_loaded(replica, version.name, at or version.where)

    def dropped(self, replica: Replica, name: str) -> None:
        """``replica`` no longer holds ``name`` (unloaded, or lost in a restart)."""
        self.registry.mark_unloaded(replica.id, name)
        self.pool.adapter_gone(replica, name)

    # -- pushing ---------------------------------------------------------------------------

    def push(self, version: Version, targets: list[Replica]) -> dict[str, asyncio.Task[Pushed]]:
        """Start pushing ``version`` to ``targets`` (none without a pusher)."""
        if self.pusher is None or not targets:
            return {}
        if version.files is None:
            gone = Pushed(cause="unreadable", detail="the proxy cannot read this version's files")
            return {r.id: asyncio.create_task(_done(gone)) for r in targets}
        return self.pusher.start(version.name, Path(version.files), version.where, targets)

    async def deliver(
        self,
        replica: Replica,
        version: Version,
        deadline: float,
        *,
        replace: bool = False,
        push: asyncio.Task[Pushed] | None = None,
        before: int | None = None,
    ) -> Outcome:
        """Load ``version`` on ``replica`` from its pushed copy when ``push`` delivers one, else
        (or when vLLM cannot find that copy) from the mount path, once the bucket holds it;
        first, every unload answered before this load (``before``: its number; None, every
        one) is over there."""
        await self.before_load(replica, before)
        if push is not None:
            pushed = await push
            if pushed.path is not None:
                outcome = await self.load_on(
                    replica, version, deadline, replace=replace, path=pushed.path
                )
                if outcome.status != "lagging":  # "No adapter found": the copy is not there
                    self._on_pushed(replica, pushed)
                    return dataclasses.replace(outcome, via="push")
                pushed = Pushed(cause="refused", detail="vLLM did not find the pushed copy")
            self._on_pushed(replica, pushed)
            log.info(
                "replica %s loads %s from the mount: push %s (%s)",
                replica.id, shown(version.name), pushed.cause, pushed.detail,
            )  # fmt: skip
        if self._mounted is not None:
            started = self.clock.monotonic()
            if not await self._mounted(version, deadline):
                elapsed = self.clock.monotonic() - started
                return Outcome(replica, "lagging", None, 0, elapsed)
        return await self.load_on(replica, version, deadline, replace=replace)

    def _eject(self, replica: Replica, error: str) -> None:
        self.pool.eject(replica, "broadcast", error)

    def deadline(self) -> float:
        return self.clock.monotonic() + self.retry.deadline_s

    async def bring_in_step(self, replica: Replica, *, manage_unknown: bool) -> bool:
        """Run the registry's plan on ``replica``; True when it holds the whole window."""
        deadline = self.deadline()
        for command in self.registry.plan(replica.id, manage_unknown=manage_unknown):
            if isinstance(command, Unload):
                if not await self.unload_on(replica, command.name):
                    return False
            elif isinstance(command, Load):
                pushes = self.push(command.version, [replica])
                outcome = await self.deliver(
                    replica,
                    command.version,
                    deadline,
                    replace=command.replace,
                    push=pushes.get(replica.id),
                )
                if outcome.status != "ok":
                    self.pool.note_error(replica, _describe(outcome, command.version.name))
                    return False
        return True

    async def load_fleet(self, version: Version, before: int | None = None) -> list[Outcome]:
        """Load ``version`` on every routable replica at once; roll back if any fails: where
        the name was served before (an in-place replace), back to the files it was served
        from, never to nothing; elsewhere by unloading it."""
        deadline = self.deadline()
        targets = self.pool.routable()
        served = {
            r.id: (self.registry.loaded[r.id][version.name], self.registry.at[r.id][version.name])
            for r in targets
            if self.registry.holds(r.id, version.name)
        }
        pushes = self.push(version, [r for r in targets if not self._holds(r, version)])
        try:
            outcomes = list(
                await asyncio.gather(
                    *(self._ensure(r, version, deadline, pushes.get(r.id), before) for r in targets)
                )
            )
        finally:
            for task in pushes.values():
                task.cancel()
        if any(o.status in ("failed", "lagging") for o in outcomes):
            # Unloaded too: a replica whose pushed copy was not loaded (its receiver drops it).
            undo = [o.replica for o in outcomes if o.status == "ok" or o.via == "push"]
            await asyncio.gather(*(self._undo(r, version.name, served.get(r.id)) for r in undo))
        return outcomes

    async def _undo(self, replica: Replica, name: str, served: tuple[Version, str] | None) -> None:
        """Take a failed load back on one replica: reload what it served under that name, in
        place, from where it loaded it (a pushed copy stays in its receiver until the name is
        unloaded); a name it did not serve is unloaded."""
        if served is None or served[0].source == "replica":
            await self.unload_on(replica, name)
            return
        version, at = served
        outcome = await self.load_on(
            replica,
            version,
            self.deadline(),
            replace=True,
            path=None if at == version.where else at,
        )
        if outcome.status != "ok":  # cannot restore it: at least serve no half-replaced name
            log.warning("replica %s: %s could not be restored after a failed replace", replica.id,
                        shown(name))  # fmt: skip
            await self.unload_on(replica, name)

    def _holds(self, replica: Replica, version: Version) -> bool:
        held = self.registry.loaded.get(replica.id, {}).get(version.name)
        return held is not None and held.source != "replica" and held.same_files(version)

    async def _ensure(
        self,
        replica: Replica,
        version: Version,
        deadline: float,
        push: asyncio.Task[Pushed] | None,
        before: int | None,
    ) -> Outcome:
        if self._holds(replica, version):
            return Outcome(replica, "ok", None, 0)
        replace = self.registry.holds(replica.id, version.name)
        return await self.deliver(
            replica, version, deadline, replace=replace, push=push, before=before
        )

    def unload_targets(self, name: str) -> list[Replica]:
        return [r for r in self.pool if r.routable or self.registry.holds(r.id, name)]


async def _no_unloads(replica: Replica, before: int | None) -> None:
    return None


async def _done(pushed: Pushed) -> Pushed:
    return pushed


def _describe(outcome: Outcome, name: str) -> str:
    if outcome.status == "lagging":
        return f"adapter {name} not visible to the replica before the deadline (mount lag)"
    if outcome.status == "unreachable":
        return "unreachable"
    status = outcome.reply.status if outcome.reply is not None else "?"
    return f"loading adapter {name} answered HTTP {status}"
