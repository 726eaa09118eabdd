"""The push's fan-out (``Tee``): every reader gets every piece in order, the writer never holds
more than its bound, a reader that stops is cut off; ``Link`` paces bytes at a shared rate."""

from __future__ import annotations

import asyncio
from typing import get_args

import pytest

from proxy.adapters.push import FALLBACK_CAUSES, FallbackCause, Link, Tee, Unreadable
from proxy.metrics.labels import PUSH_FALLBACK_CAUSES
from tests.support.clock import FakeClock

PIECES = [bytes([n]) * 10 for n in range(40)]


async def _drain(tee: Tee, i: int, delay: float = 0.0) -> list[bytes]:
    got = []
    while (piece := await tee.get(i)) is not None:
        got.append(piece)
        if delay:
            await asyncio.sleep(delay)
    await tee.detach(i)
    return got


async def test_every_reader_gets_every_piece_in_order_within_the_bound() -> None:
    tee = Tee(3, limit=50, stall_s=5.0, on_stall=lambda i: None)
    peak = 0

    async def write() -> None:
        nonlocal peak
        for piece in PIECES:
            await tee.put(piece)
            peak = max(peak, tee._held)
        await tee.close()

    readers = [_drain(tee, 0), _drain(tee, 1, delay=0.001), _drain(tee, 2)]
    *got, _ = await asyncio.gather(*readers, write())
    assert got == [PIECES, PIECES, PIECES]
    assert peak <= 50


async def test_a_reader_that_stops_is_cut_off_and_the_others_finish() -> None:
    stalled: list[int] = []
    tee = Tee(2, limit=30, stall_s=0.5, on_stall=stalled.append)

    async def write() -> None:
        for piece in PIECES:
            await tee.put(piece)
        await tee.close()

    writer = asyncio.create_task(write())
    first = await tee.get(1)  # reader 1 takes one piece, then never again
    got = await _drain(tee, 0)
    await writer
    assert got == PIECES and first == PIECES[0]
    assert stalled == [1]


async def test_a_read_error_reaches_every_reader() -> None:
    tee = Tee(2, limit=100, stall_s=5.0, on_stall=lambda i: None)
    await tee.put(b"x")
    await tee.close(Unreadable("gone"))
    for i in (0, 1):
        assert await tee.get(i) == b"x"
        with pytest.raises(Unreadable, match="gone"):
            await tee.get(i)


async def test_with_no_reader_left_the_writer_never_waits() -> None:
    tee = Tee(1, limit=10, stall_s=60.0, on_stall=lambda i: None)
    await tee.detach(0)
    for piece in PIECES:
        await asyncio.wait_for(tee.put(piece), 1.0)
    assert not tee.listening


async def test_the_link_paces_all_uploads_together() -> None:
    clock = FakeClock()
    link = Link(1000.0, clock)  # bytes per second
    done: list[float] = []

    async def send(size: int) -> None:
        await link.take(size)
        done.append(clock.now)

    start = clock.now
    tasks = [asyncio.create_task(send(500)) for _ in range(4)]
    while len(done) < 4:
        await asyncio.sleep(0)
        clock.advance(0.25)
    await asyncio.gather(*tasks)
    assert max(done) - start == 2.0  # 2,000 bytes at 1,000 bytes/s, whoever sent them


def test_the_fallback_causes_are_the_metrics_label_set() -> None:
    assert FALLBACK_CAUSES == get_args(FallbackCause) == PUSH_FALLBACK_CAUSES
