"""The available-reuse estimate (routing.reuse): what the fleet had seen, whole chunks at a time."""

from __future__ import annotations

from proxy.routing.reuse import CHUNK, ReuseEstimator


def body(prompt: bytes) -> tuple[bytes, int, int]:
    buf = b'{"prompt": ' + prompt + b"}"
    return buf, 11, 11 + len(prompt)


def test_a_repeated_prompt_is_all_available_the_first_time_nothing() -> None:
    reuse = ReuseEstimator()
    buf, lo, hi = body(b"[" + b"7, " * 400 + b"7]")
    assert reuse.observe(buf, lo, hi, seed=1) == (hi - lo, 0)
    assert reuse.observe(buf, lo, hi, seed=1) == (hi - lo, hi - lo)


def test_a_longer_turn_finds_its_history_to_the_last_whole_chunk() -> None:
    reuse = ReuseEstimator()
    first = b"[" + b"1, " * 300
    buf, lo, hi = body(first + b"2]")
    reuse.observe(buf, lo, hi, seed=1)
    buf, lo, hi = body(first + b"3, 4, 5]")
    size, available = reuse.observe(buf, lo, hi, seed=1)
    assert available == (len(first) // CHUNK) * CHUNK
    assert size - available < 2 * CHUNK


def test_another_model_shares_nothing_and_the_table_is_bounded() -> None:
    reuse = ReuseEstimator(capacity=64)
    buf, lo, hi = body(b"[" + b"9, " * 400 + b"9]")
    reuse.observe(buf, lo, hi, seed=1)
    assert reuse.observe(buf, lo, hi, seed=2)[1] == 0  # vLLM caches per adapter name
    for n in range(100):
        other, lo2, hi2 = body(b"[" + b"%d, " % n * 300 + b"0]")
        reuse.observe(other, lo2, hi2, seed=3)
    assert reuse.size <= 64
