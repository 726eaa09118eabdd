"""The adapter service: the registry, its sources and the broadcaster, behind the HTTP routes.

- ``load`` / ``unload``: TRL's calls, answered for the whole fleet (see ``broadcast``).
- ``source_changed``: a watcher found new or changed versions (pre-loaded on every replica
  before anyone asks) or versions whose directory went away (dropped, never replayed).
- ``admit``: a replica that joins or comes back is given the window before it takes traffic.
- ``out_of_step``: a replica answered "model does not exist" for a version it was believed to
  hold (it restarted between probes): forget it there and reconcile it in the background.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import Counter, deque
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import orjson
from aiohttp import web

from proxy.adapters.broadcast import Broadcaster, Outcome
from proxy.adapters.registry import Fingerprint, Registry, Version
from proxy.adapters.watcher import fingerprint
from proxy.client import SYNC_ERRORS
from proxy.errors import error_response
from proxy.logs import redact
from proxy.metrics import Metrics
from proxy.replica_info import refresh_info
from proxy.upstreams import Replica

log = logging.getLogger("proxy.adapters")

_ECHO_LIMIT = 400


class AdapterService:
    def __init__(
        self,
        broadcaster: Broadcaster,
        metrics: Metrics,
        secrets: tuple[str, ...],
        *,
        has_source: bool,
    ) -> None:
        self.broadcaster = broadcaster
        self.registry: Registry = broadcaster.registry
        self.metrics = metrics
        self.secrets = secrets
        self.has_source = has_source
        self._pending: dict[str, tuple[Version, asyncio.Task[list[Outcome]]]] = {}
        self._reconciling: dict[str, asyncio.Task[None]] = {}
        self._background: set[asyncio.Task[Any]] = set()
        self._locks: dict[str, asyncio.Lock] = {}
        # Versions the proxy retired itself (window moved on, directory gone): TRL's later
        # unload of one is answered 200, as if it had done it.
        self._retired: deque[str] = deque(maxlen=256)
        self.source_seen = False  # the source's first scan has been applied

    # -- what routing asks -------------------------------------------------------------

    def knows(self, name: str) -> bool:
        return name in self.registry.versions or name in self._pending

    # -- TRL's calls ---------------------------------------------------------------------

    async def load(self, body: bytes) -> web.Response:
        parsed = parse_adapter_request(body, need_path=True)
        if isinstance(parsed, web.Response):
            return parsed
        name, path = parsed
        if not self.broadcaster.pool.routable():
            return error_response(
                503,
                "no replica is available; retry when /health answers 200",
                headers={"Retry-After": "1"},
            )
        files = await asyncio.to_thread(fingerprint, Path(path))
        version = Version(name, path, "client", files)
        started = time.perf_counter()
        outcomes = await asyncio.shield(self._start_load(version))
        return self._answer(version, outcomes, time.perf_counter() - started)

    def _start_load(self, version: Version) -> asyncio.Task[list[Outcome]]:
        pending = self._pending.get(version.name)
        if pending is not None and pending[0].same_files(version):
            return pending[1]
        task = asyncio.create_task(self._load(version), name=f"load {version.name}")
        self._pending[version.name] = (version, task)
        task.add_done_callback(lambda _: self._done(version.name, task))
        return task

    def _done(self, name: str, task: asyncio.Task[list[Outcome]]) -> None:
        if self._pending.get(name, (None, None))[1] is task:
            del self._pending[name]

    @contextlib.asynccontextmanager
    async def _exclusive(self, name: str) -> AsyncIterator[None]:
        """One load or unload of a given name at a time, in arrival order (asyncio.Lock is FIFO)."""
        lock = self._locks.setdefault(name, asyncio.Lock())
        try:
            async with lock:
                yield
        finally:
            if not lock.locked() and self._locks.get(name) is lock:
                del self._locks[name]

    async def _load(self, version: Version) -> list[Outcome]:
        async with self._exclusive(version.name):
            return await self._load_now(version)

    async def _load_now(self, version: Version) -> list[Outcome]:
        wanted = self.registry.wanted(version.name)
        if wanted is not None and wanted.same_files(version):
            version = wanted  # keep the record (and source) the watcher made
        for name in self.registry.add(version):
            self._retired.append(name)
            self._spawn(self._unload_everywhere(name))
        started = time.perf_counter()
        outcomes = await self.broadcaster.load_fleet(version)
        ok = all(o.status in ("ok", "unreachable") for o in outcomes)
        if not ok:
            self.registry.remove(version.name)  # refused or never visible: rolled back
        # With no replica reachable yet the version stays wanted: replicas get it on admission.
        self.metrics.record_fleet_load(time.perf_counter() - started, "ok" if ok else "failed")
        for outcome in outcomes:
            if outcome.attempts:
                self.metrics.record_adapter_load(
                    outcome.replica.id, outcome.status, outcome.attempts, outcome.seconds
                )
        return outcomes

    def _answer(self, version: Version, outcomes: list[Outcome], seconds: float) -> web.Response:
        took = [o for o in outcomes if o.status == "ok"]
        failed = [o for o in outcomes if o.status == "failed"]
        lagging = [o for o in outcomes if o.status == "lagging"]
        details = {"replicas": [self._describe(o) for o in outcomes]}
        rolled = f" (rolled back on {len(took)})" if took and (failed or lagging) else ""
        if failed:
            statuses = Counter(o.reply.status for o in failed if o.reply is not None)
            status = statuses.most_common(1)[0][0] if statuses else 502
            first = self._describe(failed[0])
            message = (
                f"load_lora_adapter failed on {len(failed)} of {len(outcomes)} "
                f"replicas{rolled}; {first['replica']} answered {first['status']}: "
                f"{first.get('body', '')}"
            )
            return error_response(status, redact(message, self.secrets), extra=details)
        if lagging:
            deadline = self.broadcaster.retry.deadline_s
            message = (
                f"adapter {version.name} did not become visible at {version.path} on "
                f"{len(lagging)} of {len(outcomes)} replicas within {deadline:g} s (their "
                f"bucket mount lags){rolled}; retry the load, or raise "
                "--adapter-load-deadline"
            )
            return error_response(504, redact(message, self.secrets), extra=details)
        if not took:
            return error_response(
                502, "no replica could be reached to load the adapter", extra=details
            )
        log.info("adapter %s loaded on %d replica(s) in %.2f s", version.name, len(took), seconds)
        text = f"Success: LoRA adapter '{version.name}' added successfully."
        return web.Response(text=text)

    def _describe(self, outcome: Outcome) -> dict[str, Any]:
        out: dict[str, Any] = {
            "replica": outcome.replica.id,
            "outcome": outcome.status,
            "attempts": outcome.attempts,
        }
        if outcome.reply is not None:
            out["status"] = outcome.reply.status
            text = outcome.reply.body.decode("utf-8", "replace")[:_ECHO_LIMIT]
            out["body"] = redact(text, self.secrets)
        else:
            out["status"] = None
        return out

    async def unload(self, body: bytes) -> web.Response:
        parsed = parse_adapter_request(body, need_path=False)
        if isinstance(parsed, web.Response):
            return parsed
        name, _ = parsed
        known = (
            name in self.registry.versions
            or name in self._retired
            or any(name in r.adapters for r in self.broadcaster.pool)
        )
        async with self._exclusive(name):
            self.registry.remove(name)
            await self.broadcaster.unload_fleet(name)
        if not known:
            return error_response(404, f"The lora adapter '{name}' cannot be found.")
        return web.Response(text=f"Success: LoRA adapter '{name}' removed successfully.")

    async def _unload_everywhere(self, name: str) -> None:
        async with self._exclusive(name):
            if name not in self.registry.versions:  # a later load may have wanted it again
                await self.broadcaster.unload_fleet(name)

    # -- sources -------------------------------------------------------------------------

    async def source_changed(
        self, added: dict[str, tuple[str, Fingerprint]], removed: list[str]
    ) -> None:
        for name in removed:
            if name in self.registry.versions:
                log.info("adapter %s disappeared from the source: dropping it", name)
                self.registry.remove(name)
                self._retired.append(name)
                self._spawn(self._unload_everywhere(name))
        for name, (path, files) in sorted(added.items(), key=lambda kv: _number(kv[0])):
            version = Version(name, path, "bucket", files)
            wanted = self.registry.wanted(name)
            if wanted is not None and wanted.same_files(version):
                continue
            log.info("adapter %s found in the source: pre-loading it on every replica", name)
            self._start_load(version)
        if not self.source_seen:
            # Now the source is known, leftovers on the replicas can be told apart: clean them.
            self.source_seen = True
            for replica in self.broadcaster.pool.routable():
                self._spawn(self.admit(replica))

    # -- replicas ------------------------------------------------------------------------

    async def admit(self, replica: Replica) -> bool:
        self.registry.observe(replica.id, dict(replica.adapters))
        manage = self.has_source and self.source_seen
        ok = await self.broadcaster.bring_in_step(replica, manage_unknown=manage)
        if ok:
            self.metrics.record_reconcile()
        return ok

    def out_of_step(self, replica: Replica, name: str) -> None:
        log.warning("replica %s lost adapter %s (restarted?): reconciling it", replica.id, name)
        self.registry.mark_unloaded(replica.id, name)
        replica.adapters.pop(name, None)
        self.broadcaster.pool.refresh()
        if replica.id not in self._reconciling:
            task = asyncio.create_task(self._reconcile(replica))
            self._reconciling[replica.id] = task
            task.add_done_callback(lambda _: self._reconciling.pop(replica.id, None))

    async def _reconcile(self, replica: Replica) -> None:
        try:
            await refresh_info(self.broadcaster.client, replica)
        except SYNC_ERRORS as exc:  # the health loop takes over if it is really gone
            log.warning("replica %s: reconcile failed: %s", replica.id, exc)
            return
        if await self.admit(replica):
            log.info("replica %s reconciled", replica.id)

    def stats(self) -> dict[str, int]:
        return {
            "wanted": len(self.registry.versions),
            "loading": len(self._pending),
            "newest": self.registry.newest() or 0,
        }

    def status(self) -> dict[str, Any]:
        return {
            "window": self.registry.window,
            "wanted": sorted(self.registry.versions, key=_number),
            "loading": sorted(self._pending),
            "newest": self.registry.newest(),
        }

    def _spawn(self, coro: Any) -> None:
        task = asyncio.create_task(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def close(self) -> None:
        tasks = [
            *self._background,
            *self._reconciling.values(),
            *(task for _, task in self._pending.values()),
        ]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def _number(name: str) -> int:
    from proxy.adapters.registry import version_number

    number = version_number(name)
    return number if number is not None else -1


def parse_adapter_request(body: bytes, *, need_path: bool) -> tuple[str, str] | web.Response:
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        return error_response(400, f"request body is not valid JSON: {exc}")
    if not isinstance(data, dict):
        return error_response(400, "request body must be a JSON object")
    name, path = data.get("lora_name"), data.get("lora_path", "")
    if not isinstance(name, str) or not name:
        return error_response(400, "'lora_name' must be a non-empty string", param="lora_name")
    if need_path and (not isinstance(path, str) or not path):
        return error_response(400, "'lora_path' must be a non-empty string", param="lora_path")
    return name, path if isinstance(path, str) else ""
