"""Carrying one adapter command out on one replica: thin doers, no state of their own.

- ``load``: retried while the replica's bucket mount lags (vLLM's 404 ``No adapter found``) at
  ``retry_min_s`` growing by half to ``retry_max_s`` (``proxy.clock.Backoff``) until the
  deadline; any other error is final. A name the replica had before this proxy knew it (400
  "already been loaded") is loaded in place; an in-place load is followed by a prefix-cache
  reset (vLLM keys that cache by adapter name: it would serve KV of the old weights).
- ``deliver``: a pushed copy first (``push``), loaded from the replica's own disk; a push that
  failed (no receiver, refused, unreachable, vLLM cannot find the copy) falls back to the mount
  path, counted by cause (``on_pushed``), once ``mounted`` says the bucket holds the version (the
  mirror lands TRL's local saves behind the sync; one it gave up on is ``lagging``).
- ``unload``: 404 counts as done.
A replica that cannot be reached is ejected (cause ``broadcast``: the health loop readmits it in
step); the proxy's own lack of resources ejects nobody (``upstream.errors.blame``).
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
from proxy.adapters.registry import Version
from proxy.clock import Backoff, Clock
from proxy.fleet.pool import ReplicaPool
from proxy.fleet.replica import Replica
from proxy.upstream.client import Reply, UpstreamClient
from proxy.upstream.errors import Blame, UpstreamError, blame

# An unload is one call between two engine steps; a replica that takes longer is ejected (and
# readmitted in step), so that no later load waits on it for long.
UNLOAD_TIMEOUT_S = 30.0
MOUNT_RETRY_FACTOR = 1.5

log = logging.getLogger("proxy.adapters")

# ok: loaded; lagging: the mount never showed it in time; failed: refused (final);
# unreachable: out of routing or past the load's deadline; superseded: no longer wanted as
# these files before it was carried out (``intent``).
Status = Literal["ok", "lagging", "failed", "unreachable", "superseded"]
# mounted(version, deadline): until the bucket holds the version (True), or not by the deadline.
Mounted = Callable[[Version, float], Awaitable[bool]]


@dataclass(frozen=True, slots=True)
class LoadOutcome:
    replica: Replica
    status: Status
    reply: Reply | None = None
    attempts: int = 1
    seconds: float = 0.0
    via: Literal["push", "mount"] = "mount"
    at: str = ""  # where vLLM loaded it from (ok only)
    pushed: bool = False  # its bytes reached the replica's receiver (loaded or not)


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """From ``AdapterSettings`` (where the defaults live)."""

    deadline_s: float
    min_s: float
    max_s: float


class Carrier:
    def __init__(
        self, pool: ReplicaPool, client: UpstreamClient, clock: Clock, retry: RetryPolicy,
        pusher: Pusher | None = None, on_pushed: Callable[[Replica, Pushed], None] | None = None,
        mounted: Mounted | None = None,
    ) -> None:  # fmt: skip
        self._pool, self._client, self.clock, self.retry = pool, client, clock, retry
        self._backoff = Backoff(retry.min_s, retry.max_s, MOUNT_RETRY_FACTOR)
        self.pusher, self._mounted = pusher, mounted
        self._on_pushed = on_pushed or (lambda replica, pushed: None)

    def deadline(self) -> float:
        return self.clock.monotonic() + self.retry.deadline_s

    async def load(
        self, replica: Replica, version: Version, deadline: float, *, replace: bool = False,
        path: str | None = None,
    ) -> LoadOutcome:  # fmt: skip
        """From ``path`` (a pushed copy: there or lost, never retried), else the mount path."""
        target = path or version.where
        attempts, started = 0, self.clock.monotonic()
        while True:
            body = orjson.dumps(
                {"lora_name": version.name, "lora_path": target, "load_inplace": replace}
            )
            attempts += 1
            try:
                reply = await self._client.call(replica, "POST", "/v1/load_lora_adapter", body=body)
            except UpstreamError as exc:
                if not self._eject(replica, exc, "adapter load"):
                    return LoadOutcome(replica, "failed", None, attempts)
                return LoadOutcome(replica, "unreachable", None, attempts)
            seconds = self.clock.monotonic() - started
            if reply.status == 200:
                if replace:
                    await self._reset_cache(replica)
                return LoadOutcome(replica, "ok", reply, attempts, seconds, at=target)
            if reply.status == 400 and b"already been loaded" in reply.body and not replace:
                replace = True  # the replica has this name from before: replace it in place
                continue
            if reply.status != 404 or b"No adapter found" not in reply.body:
                return LoadOutcome(replica, "failed", reply, attempts)
            delay = self._backoff.delay(attempts - 1)
            if path is not None or self.clock.monotonic() + delay > deadline:
                return LoadOutcome(replica, "lagging", reply, attempts, seconds)
            await self.clock.sleep(delay)

    async def _reset_cache(self, replica: Replica) -> None:
        try:
            await self._client.call(replica, "POST", "/reset_prefix_cache")
        except UpstreamError:
            log.warning("replica %s: prefix cache reset after an in-place load failed", replica.id)

    async def unload(self, replica: Replica, name: str) -> bool:
        """Unload ``name``; True when the replica no longer has it (404 counts)."""
        body = orjson.dumps({"lora_name": name})
        try:
            reply = await self._client.call(
                replica, "POST", "/v1/unload_lora_adapter", body=body, timeout_s=UNLOAD_TIMEOUT_S
            )
        except UpstreamError as exc:
            self._eject(replica, exc, "adapter unload")
            return False
        if reply.status in (200, 404):
            return True
        log.warning(
            "replica %s: unload of %s answered HTTP %d", replica.id, shown(name), reply.status
        )
        return False

    def push(self, version: Version, targets: list[Replica]) -> dict[str, asyncio.Task[Pushed]]:
        """Start pushing ``version`` to ``targets``, its files read once for all (none without
        a pusher)."""
        if self.pusher is None or not targets:
            return {}
        if version.files is None:
            gone = Pushed(cause="unreadable", detail="the proxy cannot read this version's files")
            return {r.id: asyncio.create_task(_done(gone)) for r in targets}
        return self.pusher.start(version.name, Path(version.files), version.where, targets)

    async def deliver(
        self, replica: Replica, version: Version, deadline: float, *, replace: bool = False,
        push: asyncio.Task[Pushed] | None = None,
    ) -> LoadOutcome:  # fmt: skip
        """From the pushed copy when ``push`` delivers one, else from the mount path."""
        stored = False
        if push is not None:
            pushed = await push
            if pushed.path is not None:
                stored = True
                outcome = await self.load(
                    replica, version, deadline, replace=replace, path=pushed.path
                )
                if outcome.status != "lagging":  # "No adapter found": the copy is not there
                    self._on_pushed(replica, pushed)
                    return dataclasses.replace(outcome, via="push", pushed=True)
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
                return LoadOutcome(replica, "lagging", None, 0, elapsed, pushed=stored)
        outcome = await self.load(replica, version, deadline, replace=replace)
        return dataclasses.replace(outcome, pushed=stored) if stored else outcome

    def _eject(self, replica: Replica, exc: UpstreamError, during: str) -> bool:
        """Eject ``replica`` for ``exc`` unless it is the proxy's own limit; True if ejected."""
        if blame(exc) is Blame.OURS:
            log.warning("%s on %s not sent: %s", during, replica.id, exc)
            return False
        self._pool.eject(
            replica, "broadcast", f"unreachable during {during} ({type(exc).__name__})"
        )
        return True


async def _done(pushed: Pushed) -> Pushed:
    return pushed


def describe(outcome: LoadOutcome, name: str) -> str:
    """An outcome that is not ``ok``, as the replica's last error."""
    if outcome.status == "lagging":
        return f"adapter {name} not visible to the replica before the deadline (mount lag)"
    if outcome.status == "unreachable":
        return "unreachable"
    status = outcome.reply.status if outcome.reply is not None else "?"
    return f"loading adapter {name} answered HTTP {status}"
