"""The mirror's scan against a sighting that lands while its listing runs (seen once in the e2e
tier: TRL's load named ``trl-policy-v5`` between TRL's rename and the scan's listing; the scan
took the version for one TRL had deleted and pruned its bucket copy right after it landed, so a
replica's push read a file that was gone, and the version was copied again)."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest

from proxy.adapters.mirror import Mirror
from proxy.clock import RealClock
from tests.support.adapters import write_adapter

NAME = "trl-policy-v1"


def _failed(task: str, exc: BaseException) -> None:
    raise AssertionError(f"{task} failed: {exc!r}")


async def test_a_version_first_seen_during_a_scans_listing_is_kept_in_the_mirror(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    local, bucket = tmp_path / "local", tmp_path / "bucket"
    local.mkdir()
    mirror = Mirror(local, bucket, RealClock(), _failed, interval_s=60.0)
    listed, go = threading.Event(), threading.Event()
    listing = mirror._versions

    def slow_listing() -> set[str] | None:
        found = listing()  # taken before TRL's rename: the version is not in it
        listed.set()
        assert go.wait(30), "the test never let the listing return"
        return found

    monkeypatch.setattr(mirror, "_versions", slow_listing)
    scan = asyncio.create_task(mirror.scan())
    try:
        assert await asyncio.to_thread(listed.wait, 30)
        write_adapter(local, NAME)  # TRL publishes the version...
        await mirror.saw(NAME)  # ...and its load names it: the relay's sighting
    finally:
        go.set()
    await scan
    worker = asyncio.create_task(mirror.work())
    try:
        await asyncio.wait_for(mirror._empty.wait(), 30)
    finally:
        worker.cancel()
    assert (bucket / NAME / "adapter_config.json").is_file(), "its bucket copy was pruned"
    assert mirror.backlog == 0
