"""The adapter mirror: versions TRL saves on the trainer's disk, snapshotted at once and copied in
order into the bucket directory, complete or not at all, retried, pruned after TRL deletes them;
and the mount fallback that waits for the copy."""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import shutil
import threading
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any, cast

import pytest

from proxy.adapters import mirror as mirror_module
from proxy.adapters.carry import Carrier, RetryPolicy
from proxy.adapters.mirror import FAILURE_CAUSES, MAX_ATTEMPTS, MAX_BACKLOG, Mirror, MirrorEvents
from proxy.adapters.registry import Version
from proxy.adapters.sources import DirectorySource
from proxy.fleet.pool import ReplicaPool
from proxy.metrics.labels import MIRROR_FAILURE_CAUSES
from proxy.upstream.client import Reply, UpstreamClient
from tests.support.clock import FakeClock
from tests.support.waiting import wait_for


def write_version(root: Path, name: str, size: int = 4096) -> Path:
    path = root / name
    path.mkdir(parents=True)
    (path / "adapter_config.json").write_text('{"peft_type": "LORA", "r": 1}')
    (path / "adapter_model.safetensors").write_bytes(os.urandom(size))
    return path


def contents(path: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(path.iterdir())}


class Recorder:
    def __init__(self) -> None:
        self.landed: list[float] = []
        self.failures: list[str] = []
        self.bugs: list[BaseException] = []

    def events(self) -> MirrorEvents:
        return MirrorEvents(self.landed.append, self.failures.append)

    def failed(self, task: str, exc: BaseException) -> None:
        self.bugs.append(exc)


@pytest.fixture
def dirs(tmp_path: Path) -> tuple[Path, Path]:
    local, bucket = tmp_path / "local", tmp_path / "bucket" / ".vllm_lora"
    local.mkdir()
    return local, bucket


def make(
    dirs: tuple[Path, Path], clock: FakeClock, record: Recorder, copy_file: Any = shutil.copy2
) -> Mirror:
    local, bucket = dirs
    return Mirror(local, bucket, clock, record.failed, interval_s=0.5, events=record.events(),
                  copy_file=copy_file)  # fmt: skip


@pytest.fixture
async def working() -> AsyncIterator[Callable[[Mirror], None]]:
    tasks: list[asyncio.Task[None]] = []

    def start(mirror: Mirror) -> None:
        tasks.append(asyncio.create_task(mirror.work()))

    yield start
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


async def landed(mirror: Mirror, name: str) -> bool:
    version = Version(name, str(mirror.local / name), "client", mount=mirror.target(name))
    return await mirror.mounted(version, deadline=float("inf"))


def test_the_metrics_know_every_failure_cause() -> None:
    assert MIRROR_FAILURE_CAUSES == FAILURE_CAUSES


async def test_a_snapshot_survives_the_local_copy_being_deleted(
    dirs: tuple[Path, Path], working: Callable[[Mirror], None]
) -> None:
    local, bucket = dirs
    mirror = make(dirs, FakeClock(), record := Recorder())
    source = write_version(local, "trl-policy-v1", 1 << 20)
    original = contents(source)
    await mirror.saw("trl-policy-v1")  # the snapshot is taken here, before any copy
    shutil.rmtree(source)  # TRL pruned it before the mirror got to it
    working(mirror)
    assert await landed(mirror, "trl-policy-v1")
    assert contents(bucket / "trl-policy-v1") == original
    assert len(record.landed) == 1 and not record.failures
    assert not any((local / ".mirror").iterdir())  # the snapshot is dropped once landed


async def test_versions_land_in_the_order_first_seen(
    dirs: tuple[Path, Path], working: Callable[[Mirror], None]
) -> None:
    local, _ = dirs
    order: list[str] = []

    def copy(src: str, dst: str) -> None:
        if dst.endswith("adapter_config.json"):
            order.append(Path(dst).parent.name)
        shutil.copy2(src, dst)

    mirror = make(dirs, FakeClock(), Recorder(), copy)
    names = [f"trl-policy-v{n}" for n in (1, 2, 3, 4)]
    for name in names:
        write_version(local, name)
        await mirror.saw(name)
    working(mirror)
    assert await landed(mirror, names[-1])
    assert order == [f".{name}.tmp" for name in names]


async def test_no_partial_directory_is_ever_visible_under_the_final_name(
    dirs: tuple[Path, Path], working: Callable[[Mirror], None]
) -> None:
    local, bucket = dirs
    seen_early: list[str] = []

    def copy(src: str, dst: str) -> None:
        final = bucket / "trl-policy-v1"
        if final.exists():
            seen_early.append(f"{final} visible while {Path(dst).name} was being copied")
        shutil.copy2(src, dst)

    mirror = make(dirs, FakeClock(), Recorder(), copy)
    original = contents(write_version(local, "trl-policy-v1"))
    await mirror.saw("trl-policy-v1")
    working(mirror)
    assert await landed(mirror, "trl-policy-v1")
    assert not seen_early
    assert contents(bucket / "trl-policy-v1") == original
    assert sorted(p.name for p in bucket.iterdir()) == ["trl-policy-v1"]  # no staging left


async def test_a_failing_copy_is_retried_with_backoff_then_lands(
    dirs: tuple[Path, Path], working: Callable[[Mirror], None]
) -> None:
    local, bucket = dirs
    record = Recorder()

    def flaky(src: str, dst: str) -> None:
        if len(record.failures) < 2:  # the first two attempts fail
            raise OSError("the bucket mount went away for a moment")
        shutil.copy2(src, dst)

    clock = FakeClock()
    mirror = make(dirs, clock, record, flaky)
    write_version(local, "trl-policy-v1")
    await mirror.saw("trl-policy-v1")
    working(mirror)
    for _ in range(2):  # each failed attempt waits on the clock before the next
        await wait_for(lambda: clock.timers, what="the retry's backoff")
        clock.advance(mirror_module.RETRY.max_s)
    assert await landed(mirror, "trl-policy-v1")
    assert record.failures == ["copy", "copy"]
    assert (bucket / "trl-policy-v1" / "adapter_model.safetensors").is_file()


async def test_a_copy_that_always_fails_is_given_up_after_its_attempts(
    dirs: tuple[Path, Path], working: Callable[[Mirror], None]
) -> None:
    local, bucket = dirs

    def broken(src: str, dst: str) -> None:
        raise OSError("read-only file system")

    clock = FakeClock()
    mirror = make(dirs, clock, record := Recorder(), broken)
    theirs = contents(write_version(bucket, "trl-policy-v1"))  # another writer's bytes
    write_version(local, "trl-policy-v1")
    await mirror.scan()
    working(mirror)
    waiting = asyncio.create_task(landed(mirror, "trl-policy-v1"))
    await wait_for(lambda: clock.timers, what="the waiter")
    for _ in range(MAX_ATTEMPTS - 1):
        await wait_for(lambda: clock.timers > 1, what="the retry's backoff")
        clock.advance(mirror_module.RETRY.max_s)
    assert await waiting is False  # a waiter is told, not left to its deadline
    assert record.failures == ["copy"] * MAX_ATTEMPTS + ["gave_up"]
    shutil.rmtree(local / "trl-policy-v1")
    await mirror.scan()  # gone from the trainer's disk: the bucket's copy is not the mirror's
    await wait_for(lambda: not mirror._jobs, what="the prune")
    assert contents(bucket / "trl-policy-v1") == theirs


async def test_a_backlog_past_its_bound_is_logged_and_counted_and_nothing_is_dropped(
    dirs: tuple[Path, Path], working: Callable[[Mirror], None], caplog: pytest.LogCaptureFixture
) -> None:
    local, bucket = dirs
    mirror = make(dirs, FakeClock(), record := Recorder())
    names = [f"trl-policy-v{n}" for n in range(1, MAX_BACKLOG + 3)]
    with caplog.at_level(logging.WARNING, "proxy.adapters"):
        for name in names:  # the worker is not running: every one waits
            write_version(local, name)
            await mirror.saw(name)
    assert mirror.backlog == MAX_BACKLOG + 2
    assert record.failures == ["backlog", "backlog"]
    assert "none is dropped" in caplog.text
    working(mirror)
    for name in names:
        assert await landed(mirror, name)
    assert sorted(p.name for p in bucket.iterdir()) == sorted(names)
    assert mirror.backlog == 0


async def test_a_version_deleted_locally_is_pruned_from_the_bucket_after_its_copy(
    dirs: tuple[Path, Path], working: Callable[[Mirror], None]
) -> None:
    local, bucket = dirs
    copied: list[str] = []

    def copy(src: str, dst: str) -> None:
        copied.append(Path(dst).parent.name)
        shutil.copy2(src, dst)

    mirror = make(dirs, FakeClock(), Recorder(), copy)
    foreign = write_version(bucket, "trl-policy-v9")  # not the mirror's: never pruned
    write_version(local, "trl-policy-v1")
    write_version(local, "trl-policy-v2")
    await mirror.scan()
    working(mirror)
    assert await landed(mirror, "trl-policy-v2")
    shutil.rmtree(local / "trl-policy-v1")  # TRL deletes the version that left its window
    write_version(local, "trl-policy-v3")
    await mirror.saw("trl-policy-v3")
    shutil.rmtree(local / "trl-policy-v3")  # ... even one the mirror has not landed yet
    await mirror.scan()
    await wait_for(lambda: not mirror._jobs, what="the prunes")
    assert sorted(p.name for p in bucket.iterdir()) == ["trl-policy-v2", "trl-policy-v9"]
    assert ".trl-policy-v3.tmp" in copied  # it landed before it was pruned
    assert foreign.is_dir()


async def test_dot_names_are_never_versions(
    dirs: tuple[Path, Path], working: Callable[[Mirror], None]
) -> None:
    local, bucket = dirs
    mirror = make(dirs, FakeClock(), Recorder())
    write_version(local, ".trl-policy-v3.tmp")  # TRL's staging folder, complete for a moment
    write_version(local / ".mirror", "000001-trl-policy-v2")
    write_version(local, "trl-policy-v1")
    await mirror.scan()
    working(mirror)
    assert await landed(mirror, "trl-policy-v1")
    assert sorted(p.name for p in bucket.iterdir()) == ["trl-policy-v1"]
    assert list(await DirectorySource(local, 0.5).scan()) == ["trl-policy-v1"]


async def test_the_same_files_seen_twice_are_copied_once(
    dirs: tuple[Path, Path], working: Callable[[Mirror], None]
) -> None:
    local, _ = dirs
    mirror = make(dirs, FakeClock(), record := Recorder())
    write_version(local, "trl-policy-v1")
    await mirror.saw("trl-policy-v1")  # TRL's load
    await mirror.scan()  # the mirror's own look, a moment later
    working(mirror)
    assert await landed(mirror, "trl-policy-v1")
    assert len(record.landed) == 1


# -- the mount fallback waits for the mirror ----------------------------------------------------


class Loads:
    """A replica's control plane: records each load's path and whether it existed then."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, bool]] = []

    async def call(self, replica: Any, method: str, path: str, **kwargs: Any) -> Reply:
        import orjson

        target = orjson.loads(kwargs["body"])["lora_path"]
        self.calls.append((target, await asyncio.to_thread(os.path.isdir, target)))
        return Reply(200, b"Success", "text/plain")


def carrier(clock: FakeClock, mirror: Mirror) -> tuple[Carrier, Loads, Any]:
    pool = ReplicaPool(["http://127.0.0.1:9"], clock=clock)
    (replica,) = tuple(pool)
    loads = Loads()
    client = cast(UpstreamClient, loads)
    retry = RetryPolicy(60.0, 0.05, 0.25)
    made = Carrier(pool, client, clock, retry, mounted=mirror.mounted)
    return made, loads, replica


async def test_a_replica_without_a_receiver_loads_the_bucket_copy_only_once_it_landed(
    dirs: tuple[Path, Path], working: Callable[[Mirror], None]
) -> None:
    local, bucket = dirs
    entered, release = threading.Event(), threading.Event()

    def gated(src: str, dst: str) -> None:
        entered.set()
        assert release.wait(10)
        shutil.copy2(src, dst)

    clock = FakeClock()
    mirror = make(dirs, clock, Recorder(), gated)
    path = write_version(local, "trl-policy-v1")
    await mirror.saw("trl-policy-v1")
    working(mirror)
    fleet, loads, replica = carrier(clock, mirror)
    version = Version("trl-policy-v1", str(path), "client", mount=mirror.target("trl-policy-v1"))
    delivering = asyncio.create_task(fleet.deliver(replica, version, clock.now + 60))
    await wait_for(entered.is_set, what="the mirror's copy to start")
    for _ in range(20):
        await asyncio.sleep(0)  # the delivery runs as far as it can while the copy is held
    assert loads.calls == []
    release.set()
    outcome = await delivering
    assert outcome.status == "ok"
    assert loads.calls == [(str(bucket / "trl-policy-v1"), True)]


async def test_the_fallback_gives_up_at_the_load_deadline_if_the_copy_has_not_landed(
    dirs: tuple[Path, Path],
) -> None:
    local, _ = dirs
    clock = FakeClock()
    mirror = make(dirs, clock, Recorder())
    path = write_version(local, "trl-policy-v1")
    await mirror.saw("trl-policy-v1")  # no worker: it never lands
    fleet, loads, replica = carrier(clock, mirror)
    version = Version("trl-policy-v1", str(path), "client", mount=mirror.target("trl-policy-v1"))
    delivering = asyncio.create_task(fleet.deliver(replica, version, clock.now + 60))
    await wait_for(lambda: clock.timers, what="the wait on the deadline")
    clock.advance(60)
    outcome = await delivering
    assert outcome.status == "lagging" and loads.calls == []


async def test_a_local_directory_that_cannot_be_listed_prunes_nothing(
    dirs: tuple[Path, Path],
    working: Callable[[Mirror], None],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """An unreadable listing is not an empty one: every mirrored copy in the bucket was pruned.
    Said once and counted once while it lasts; the prunes resume when it reads again."""
    local, bucket = dirs
    mirror = make(dirs, FakeClock(), record := Recorder())
    for name in ("trl-policy-v1", "trl-policy-v2"):
        write_version(local, name)
    await mirror.scan()
    working(mirror)
    assert await landed(mirror, "trl-policy-v2")
    real = os.scandir

    def scandir(path: Any) -> Any:
        if Path(path) == mirror.local:
            raise OSError(errno.EIO, "Input/output error")
        return real(path)

    monkeypatch.setattr(os, "scandir", scandir)
    for _ in range(3):
        await mirror.scan()
    assert not mirror._jobs
    assert sorted(p.name for p in bucket.iterdir()) == ["trl-policy-v1", "trl-policy-v2"]
    assert record.failures == ["listing"]
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warned) == 1 and "cannot be listed" in warned[0] and "nothing is pruned" in warned[0]
    monkeypatch.setattr(os, "scandir", real)
    shutil.rmtree(local / "trl-policy-v1")
    await mirror.scan()
    await wait_for(lambda: not mirror._jobs, what="the prune")
    assert sorted(p.name for p in bucket.iterdir()) == ["trl-policy-v2"]
