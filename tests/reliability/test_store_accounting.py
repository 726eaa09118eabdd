"""The store's cap counts what an adapter takes on disk, and counting costs the same however
full the store is (issue 27, finding 7: 400 uploads of 64 one-byte files were charged 25,600
bytes of a 1 MiB cap while they took 106 MiB and 26.8k inodes; empty files were free; every
``reserve`` read every entry under the lock). Then the probe's load shapes as one bounded soak
against a real proxy on loopback: afterwards the accounting is exactly what is on disk."""

from __future__ import annotations

import asyncio
import dataclasses
import os
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

from adapter_receiver.receive import Limits, Receiver
from adapter_receiver.store import ENTRY_OVERHEAD, FILE_OVERHEAD, Store, charge
from adapter_receiver.wire import UploadError
from proxy.app import PROXY, build_app, serve
from proxy.config import Settings
from tests.reliability.test_receiver_resets import _reset_after
from tests.support.fleet import FAST_HEALTH, run_sim
from tests.support.uploads import listing, manifest_line, put, upload_body
from tests.support.waiting import eventually

MIB = 1 << 20
TINY = {f"f{i:02d}.bin": b"x" for i in range(64)}  # the probe's shape: 64 one-byte files


async def _chunks(body: bytes) -> AsyncIterator[bytes]:
    yield body


def _on_disk(root: Path) -> tuple[int, int]:
    """Bytes the filesystem holds for the store's adapters (blocks), and their inodes."""
    used, inodes = 0, 0
    for folder, dirs, files in os.walk(root):
        for name in (*dirs, *files):
            if name.startswith(".usage") or name == ".lock":
                continue
            inodes += 1
            used += os.lstat(Path(folder) / name).st_blocks * 512
    return used, inodes


async def test_tiny_and_empty_files_are_charged_what_they_take_on_disk(tmp_path: Path) -> None:
    store = Store(tmp_path / "store", MIB)
    store.reset()
    receiver = Receiver(store, Limits())
    body = upload_body(TINY)
    first = await receiver.upload("tiny-0", len(body), _chunks(body))
    assert first.status == 201, first.body
    assert store.used() == charge([1] * 64) == ENTRY_OVERHEAD + 64 * (4096 + FILE_OVERHEAD)
    second = await receiver.upload("tiny-1", len(body), _chunks(body))
    assert second.status == 507, second.body  # a 1 MiB store holds one such adapter, not 400
    assert "the upload's files on disk" in second.body["error"]["message"]
    empty = upload_body({"adapter_config.json": b""})
    answers = [await receiver.upload(f"empty-{i}", len(empty), _chunks(empty)) for i in range(60)]
    admitted = sum(a.status == 201 for a in answers)
    assert 0 < admitted < 60  # empty files cost an inode's worth each: not free
    assert store.used() <= store.max_store_bytes
    disk, _ = _on_disk(store.root)
    assert disk <= store.used()  # what the cap counts covers what the disk holds
    receiver.close()


async def test_entries_are_capped_and_dropping_one_makes_room(tmp_path: Path) -> None:
    store = Store(tmp_path / "store", 64 * MIB, max_entries=3)
    store.reset()
    receiver = Receiver(store, Limits())
    body = upload_body({"adapter_config.json": b"{}"})
    statuses = [(await receiver.upload(f"a{i}", len(body), _chunks(body))).status for i in range(4)]
    assert statuses == [201, 201, 201, 507]
    store.drop("a0")
    assert (await receiver.upload("a3", len(body), _chunks(body))).status == 201
    receiver.close()


def test_reserving_reads_no_entry(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """O(1): ``reserve`` reads the usage file, never the entries (whatever their number)."""
    store = Store(tmp_path / "store", 64 * MIB)
    store.reset()
    for i in range(20):
        tmp = store.reserve(f"n{i}", [10])
        (tmp / "adapter_config.json").write_bytes(b"0123456789")
        store.publish(tmp, f"n{i}", [("adapter_config.json", 10, "0" * 64)], None)

    def no_scan(*_: object) -> None:
        raise AssertionError("reserve read an entry")

    monkeypatch.setattr(Store, "_entry", no_scan)
    monkeypatch.setattr(Store, "entries", no_scan)
    assert store.reserve("n20", [10]).is_dir()
    assert store.used() == 21 * charge([10])


async def test_the_probes_load_shapes_leave_the_accounting_equal_to_the_disk(
    tmp_path: Path,
) -> None:
    """40 resets of 1 GiB manifests, 8 tricklers past the whole-upload deadline, 400 uploads of
    64 tiny files: bounded, against the proxy's receiver on loopback."""
    root = tmp_path / "store"
    async with run_sim() as sim:
        settings = Settings.model_validate(
            {"replicas": [sim.url], "adapter_store": str(root),
             "adapter_store_max_bytes": 12 * MIB, **FAST_HEALTH}
        )  # fmt: skip
        app = build_app(settings)
        receiver = app[PROXY].adapters.receiver
        # The deadline shortened for the tricklers: 0.5 s plus 1 s a MiB (60 s plus 1 s a MiB).
        product = receiver.limits
        receiver.limits = dataclasses.replace(product, floor_s=0.5)
        async with serve(app) as url, aiohttp.ClientSession() as session:
            huge = manifest_line({"adapter_model.safetensors": 1 << 30})
            for i in range(40):
                await _reset_after(url, f"reset-{i}", [huge], len(huge) + (1 << 30) + 64)

            guard = app[PROXY].edge.guard

            async def resets_ended() -> bool:  # each reset's handler may run on a moment, and
                # one may start after another ended: none can once their connections are gone
                return guard.connections == 0 and receiver.uploads_in_progress == 0

            await eventually(resets_ended, timeout=60, what="the resets' uploads to end")
            slots = receiver.limits.max_uploads  # all 8 at once, none refused as busy (503)
            ended = await asyncio.gather(*(_trickle(url, f"slow-{i}") for i in range(slots)))
            assert all(status in (0, 408) for status in ended), str(ended)  # 0: cut off mid-send

            async def settled() -> bool:
                view = await listing(session, url)
                return bool(view["bytes"] == sum(e["charged"] for e in view["adapters"]))

            # A trickler's reservation is given back just after its answer (a thread's work).
            await eventually(settled, what="nothing reserved once the tricklers are gone")
            # The tiny uploads under the product's deadline: on a busy machine one of them
            # took longer than 0.5 s and was answered 408, one fewer on disk.
            receiver.limits = product
            tiny = upload_body(TINY)
            statuses = [(await put(session, url, f"tiny-{i}", tiny))[0] for i in range(400)]
            assert statuses.count(201) == 12 * MIB // charge([1] * 64)  # as many as fit on disk
            assert set(statuses) == {201, 507}
            await eventually(settled, what="nothing reserved once the senders are gone")
            view = await listing(session, url)
    assert list((root / ".tmp").iterdir()) == []
    assert {e["name"] for e in view["adapters"]} <= {f"tiny-{i}" for i in range(400)}
    disk, inodes = _on_disk(root)
    assert disk <= view["bytes"]  # the accounting covers every block the adapters hold
    assert inodes <= len(view["adapters"]) * (2 + 1 + 64) + 1  # name dir, entry, META, files


async def _trickle(url: str, name: str) -> int:
    """A sender of one byte every 50 ms for a 1 MiB file: the receiver's deadline (1.5 s here)
    ends it; returns the status it got, 0 if the connection was cut while it was sending."""
    head = manifest_line({"adapter_model.safetensors": MIB})
    length = len(head) + MIB + 64

    async def slowly() -> AsyncIterator[bytes]:
        yield head
        for _ in range(600):  # 30 s at most; the deadline ends it far sooner
            await asyncio.sleep(0.05)  # kept: the trickle's pace is the scenario
            yield b"\0"

    timeout = aiohttp.ClientTimeout(total=60)
    try:
        async with (
            aiohttp.ClientSession(timeout=timeout) as session,
            session.put(
                f"{url}/rollout/adapters/{name}",
                data=slowly(),
                headers={"Content-Length": str(length)},
            ) as response,  # fmt: skip
        ):
            return response.status
    except aiohttp.ClientError:
        return 0


def test_a_lost_usage_file_is_recounted_never_read_as_empty(tmp_path: Path) -> None:
    """A temp cleaner or a crash may take ``.usage``: the caps must not fail open."""
    store = Store(tmp_path / "store", 3 * charge([10]))
    store.reset()
    for i in range(2):
        tmp = store.reserve(f"n{i}", [10])
        (tmp / "adapter_config.json").write_bytes(b"0123456789")
        store.publish(tmp, f"n{i}", [("adapter_config.json", 10, "0" * 64)], None)
    assert store.reserve("n2", [10]).is_dir()  # an upload in progress is charged too
    (store.root / ".usage").unlink()
    assert store.used() == 3 * charge([10])
    with pytest.raises(UploadError) as refused:
        store.reserve("n3", [10])
    assert refused.value.status == 507


def test_discarding_twice_releases_once(tmp_path: Path) -> None:
    store = Store(tmp_path / "store", 64 * MIB)
    store.reset()
    kept = store.reserve("kept", [10])
    tmp = store.reserve("twice", [10])
    store.discard(tmp)
    store.discard(tmp)  # the receiver's undo and its clean-up may both run
    assert store.used() == charge([10])
    assert [p.name for p in (store.root / ".tmp").iterdir()] == [kept.name]
