"""Senders that trickle: each keeps to the idle rule (a byte well within every gap) yet would
hold an upload slot and its whole reservation for as long as it likes. The whole-upload
deadline (``Limits.deadline_s``) ends them, gives the space back, and frees the slots."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path

from adapter_receiver.receive import Limits, Receiver
from adapter_receiver.store import Store
from tests.support.uploads import manifest_line
from tests.support.waiting import wait_for

TRICKLERS = 8


async def _trickle(head: bytes, stop: asyncio.Event) -> AsyncIterator[bytes]:
    yield head
    while not stop.is_set():
        await asyncio.sleep(0.05)  # kept: the pace is the scenario (a byte well within the gap)
        yield b"\0"


async def test_eight_tricklers_are_ended_by_the_deadline_and_give_everything_back(
    tmp_path: Path,
) -> None:
    store = Store(tmp_path / "store", 64 << 20)
    store.reset()
    # 0.5 s plus 1 s a MiB; the idle rule (30 s) alone would never end them.
    receiver = Receiver(store, Limits(max_uploads=TRICKLERS, min_rate=1 << 20, floor_s=0.5))
    stop = asyncio.Event()
    size = 6 << 20
    head = manifest_line({"adapter_model.safetensors": size})
    length = len(head) + size + 64
    started = time.monotonic()
    try:
        answers = await asyncio.wait_for(
            asyncio.gather(
                *(
                    receiver.upload(f"slow-{i}", length, _trickle(head, stop))
                    for i in range(TRICKLERS)
                )
            ),
            timeout=60,
        )
    finally:
        stop.set()
        receiver.close()
    took = time.monotonic() - started
    assert [a.status for a in answers] == [408] * TRICKLERS
    assert "must average at least" in answers[0].body["error"]["message"]
    assert took < 30, took  # the deadline (6.5 s), not the idle rule, ended them
    assert store.used() == 0
    assert list((store.root / ".tmp").iterdir()) == []
    assert receiver._uploads == 0  # every slot back


async def test_a_ninth_upload_waits_for_no_slot_it_is_refused_at_once(tmp_path: Path) -> None:
    store = Store(tmp_path / "store", 64 << 20)
    store.reset()
    receiver = Receiver(store, Limits(max_uploads=TRICKLERS, min_rate=1 << 20, floor_s=30))
    stop = asyncio.Event()
    head = manifest_line({"adapter_model.safetensors": 1 << 20})
    length = len(head) + (1 << 20) + 64
    held = [
        asyncio.create_task(receiver.upload(f"slow-{i}", length, _trickle(head, stop)))
        for i in range(TRICKLERS)
    ]
    try:
        await wait_for(lambda: receiver._uploads == TRICKLERS, what="every slot taken")
        ninth = await asyncio.wait_for(
            receiver.upload("ninth", length, _trickle(head, stop)), timeout=10
        )
        assert ninth.status == 503
        assert "uploads in progress" in ninth.body["error"]["message"]
    finally:
        stop.set()
        for task in held:
            task.cancel()
        await asyncio.gather(*held, return_exceptions=True)
        receiver.close()
    assert store.used() == 0


async def test_an_upload_that_stops_sending_is_abandoned_after_the_idle_limit(
    tmp_path: Path,
) -> None:
    store = Store(tmp_path / "store", 64 << 20)
    store.reset()
    receiver = Receiver(store, Limits(idle_timeout_s=0.2))
    head = manifest_line({"adapter_model.safetensors": 1 << 20})
    forever = asyncio.Event()

    async def stops() -> AsyncIterator[bytes]:
        yield head
        yield b"\0" * 1000
        await forever.wait()  # the sender goes quiet, the connection stays open
        yield b""

    try:
        answer = await asyncio.wait_for(
            receiver.upload("quiet", len(head) + (1 << 20) + 64, stops()), timeout=30
        )
    finally:
        forever.set()
        receiver.close()
    assert answer.status == 408, answer.body
    assert store.used() == 0
    assert list((store.root / ".tmp").iterdir()) == []
