"""The adapters room assembled: the registry, the proxy's receiver store, the pusher, the
mirror (``--adapters-local``), the carrier, the state file, the service and the source's
watcher, made from the settings in one place.

The store is the proxy's own receiver's (a relay pushes adapters into this proxy): emptied at
start (but for the copies an adopted state file still wants) and, unless ``--adapter-store``
named it, removed at exit (``Adapters.open_store``).
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
import logging
import os
import shutil
import tempfile
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

from adapter_receiver.receive import Limits, Receiver
from adapter_receiver.store import Entry, Store, claimable
from proxy.adapters.attest.check import CheckSettings, ServedPolicyCheck
from proxy.adapters.carry import Carrier, RetryPolicy
from proxy.adapters.mirror import Mirror, MirrorEvents
from proxy.adapters.origin import Origins
from proxy.adapters.push import Pushed, Pusher
from proxy.adapters.registry import Registry
from proxy.adapters.service import AdapterService
from proxy.adapters.sources import BucketSource, DirectorySource, Source
from proxy.adapters.state import Saved, StateFile
from proxy.adapters.watcher import Watcher
from proxy.clock import Clock, TaskFailed
from proxy.config import AdapterSettings, Settings, split_bucket
from proxy.fleet.replica import Replica
from proxy.fleet.wiring import Members
from proxy.metrics.recorder import Metrics
from proxy.runs.table import Runs

log = logging.getLogger("proxy")


@dataclass(frozen=True, slots=True)
class Adapters:
    service: AdapterService
    receiver: Receiver  # the proxy's own receiver (its store)
    watcher: Watcher | None  # None without --adapter-dir / --adapter-bucket
    named_store: bool  # --adapter-store named the store: kept at exit
    mirror: Mirror | None = None  # None without --adapters-local / --adapters-mirror

    @asynccontextmanager
    async def open_store(self) -> AsyncIterator[None]:
        """What a previous process of this proxy wanted (its state file), and the receiver's
        store, emptied for the proxy's lifetime but for the copies that state still wants;
        removed after unless named."""
        store = self.receiver.store
        state = self.service.state
        saved = await asyncio.to_thread(state.file.read) if state is not None else None
        keep: list[Path] = []
        if saved is not None:
            adopted, keep = await asyncio.to_thread(_readable, saved, store.root)
            self.service.adopt(adopted)
        await asyncio.to_thread(store.reset, keep)
        try:
            yield
        finally:
            self.receiver.close()
            if not self.named_store:
                await asyncio.to_thread(shutil.rmtree, store.root, True)

    @asynccontextmanager
    async def mirroring(self) -> AsyncIterator[None]:
        """The mirror's scan and worker, when there is one (``Mirror.running``)."""
        if self.mirror is None:
            yield
            return
        log.info("mirroring adapter versions from %s into %s", self.mirror.local,
                 self.mirror.mirror)  # fmt: skip
        async with self.mirror.running():
            yield


def build_adapters(
    settings: Settings,
    members: Members,
    clock: Clock,
    metrics: Metrics,
    failed: TaskFailed,
    runs: Runs,
) -> Adapters:
    config = settings.adapters
    retry = RetryPolicy(config.load_deadline_s, config.retry_min_s, config.retry_max_s)
    store = Store(store_path(settings), config.store_max_bytes)
    pusher = None
    if config.push:
        pusher = Pusher(
            members.client,
            clock,
            buffer_bytes=config.push_buffer_bytes,
            stall_s=config.push_stall_s,
            rate=config.push_rate,
            probe_timeout_s=settings.health.timeout_s,
            failed=failed,
        )

    def pushed(replica: Replica, outcome: Pushed) -> None:
        if outcome.path is not None:
            metrics.record_push(replica.id, outcome.bytes, outcome.seconds)
        elif outcome.cause is not None:
            metrics.record_push_fallback(outcome.cause)

    mirror = None
    if config.local is not None and config.mirror is not None:
        events = MirrorEvents(metrics.record_mirror_landed, metrics.record_mirror_failure)
        interval = config.watch_interval_s or 0.5
        mirror = Mirror(config.local, config.mirror, clock, failed, interval_s=interval,
                        events=events)  # fmt: skip
    registry = Registry(runs, window_override=config.window)
    carrier = Carrier(
        members.pool, members.client, clock, retry, pusher, on_pushed=pushed,
        mounted=mirror.mounted if mirror is not None else None,
    )  # fmt: skip
    source = build_source(config, settings.hub_endpoint)
    state_dir = state_path(settings)
    state = None
    if state_dir is not None:
        state = StateFile(state_dir, state_key(settings), config.state_max_age_s)
    origins = Origins(store, mirror, _fetcher(source, store), pusher is not None)
    checks = CheckSettings(
        config.probe, config.probe_tolerance, config.probe_repeat, config.probe_timeout_s
    )
    check = ServedPolicyCheck(checks, members.client, registry, metrics.record_probe)
    service = AdapterService(
        registry, carrier, members.pool, members.info, metrics, origins, check,
        failed=failed, has_source=source is not None, state=state,
    )  # fmt: skip
    watcher = None if source is None else Watcher(source, clock, service.source_changed, failed)
    receiver = Receiver(store, Limits(max_adapter_bytes=config.store_max_adapter_bytes))
    return Adapters(service, receiver, watcher, config.store is not None, mirror)


def store_path(settings: Settings) -> Path:
    """``--adapter-store``, else one per port (a supervised restart empties its own), else a
    fresh private one: for port 0, or when the per-port path is not ours (never followed)."""
    if settings.adapters.store is not None:
        return settings.adapters.store
    if settings.port:
        path = Path(tempfile.gettempdir()) / f"rollout-proxy-{settings.port}-adapters"
        why = claimable(path)
        if why is None:
            return path
        log.warning("adapter store: %s, so a fresh private directory is used", why)
    return Path(tempfile.mkdtemp(prefix="rollout-proxy-adapters-"))


def state_path(settings: Settings) -> Path | None:
    """``--state-dir``, else one per port in the temp directory (when it is ours: never a
    symlink or another user's), else none: a proxy on port 0 has no stable identity."""
    if settings.adapters.state_dir is not None:
        return settings.adapters.state_dir
    if not settings.port:
        return None
    path = Path(tempfile.gettempdir()) / f"rollout-proxy-{settings.port}-state"
    why = claimable(path)
    if why is not None:
        log.warning("adapter state: %s, so it is not kept across restarts", why)
        return None
    return path


def state_key(settings: Settings) -> str:
    """What makes a proxy the same proxy across its restarts (``adapters.state``): its
    replicas (or how it discovers them), its adapter sources and directories, its address."""
    a = settings.adapters
    identity = {
        "replicas": sorted(settings.replica_urls),
        "discover": [settings.discover, settings.discover_namespace],
        "adapters": [str(p) for p in (a.dir, a.bucket, a.local, a.mirror) if p is not None],
        "mount": a.mount_path,
        "listen": [settings.host, settings.port],
    }
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()


def _readable(saved: Saved, store_root: Path) -> tuple[Saved, list[Path]]:
    """``saved`` with each version's ``files`` where this proxy can read its bytes now (its
    store entry, its path, its bucket copy) or None; and the store entries to keep. Blocking."""
    versions, keep = [], []
    root = os.path.realpath(store_root)
    for version in saved.versions:
        candidates = [version.files, version.path, version.where]
        files = next((p for p in candidates if p is not None and os.path.isdir(p)), None)
        if files is not None and os.path.dirname(os.path.dirname(os.path.realpath(files))) == root:
            keep.append(Path(files))
        versions.append(dataclasses.replace(version, files=files))
    return dataclasses.replace(saved, versions=tuple(versions)), keep


def build_source(settings: AdapterSettings, hub_endpoint: str | None) -> Source | None:
    if settings.dir is not None:
        return DirectorySource(settings.dir, settings.watch_interval_s or 0.5)
    if settings.bucket is not None:
        bucket_id, prefix = split_bucket(settings.bucket)
        interval = settings.watch_interval_s or 2.0
        return BucketSource(bucket_id, prefix, settings.mount_path, interval, hub_endpoint)
    return None


def _fetcher(source: Source | None, store: Store) -> Callable[[str, str], Entry | None] | None:
    """Downloads through the Hub for a bucket source (the proxy has no mount to read)."""
    if not isinstance(source, BucketSource):
        return None
    bucket = source

    def fetch(name: str, path: str) -> Entry | None:
        return bucket.fetch(name, store, path) if bucket.covers(path) == name else None

    return fetch
