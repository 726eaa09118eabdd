"""The consistent hash ring: determinism, balance, minimal movement (hypothesis)."""

from __future__ import annotations

from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.routing.hashring import HashRing

ids = st.lists(st.text(min_size=1, max_size=12), min_size=1, max_size=12, unique=True)
keys = st.lists(st.integers(0, 2**64 - 1), min_size=1, max_size=200)


@given(ids, keys)
def test_preference_lists_every_id_once_starting_with_first(
    members: list[str], ks: list[int]
) -> None:
    ring = HashRing(members, vnodes=8)
    for key in ks:
        order = list(ring.preference(key))
        assert sorted(order) == sorted(members)
        assert order[0] == ring.first(key)


@given(ids, keys)
def test_same_members_same_placement_whatever_the_order(members: list[str], ks: list[int]) -> None:
    a, b = HashRing(members, vnodes=8), HashRing(list(reversed(members)), vnodes=8)
    assert [a.first(k) for k in ks] == [b.first(k) for k in ks]


@settings(max_examples=30)
@given(ids.filter(lambda m: len(m) >= 2), keys)
def test_removing_one_id_moves_only_its_keys(members: list[str], ks: list[int]) -> None:
    full = HashRing(members, vnodes=16)
    gone = members[0]
    rest = HashRing(members[1:], vnodes=16)
    for key in ks:
        before = full.first(key)
        if before != gone:
            assert rest.first(key) == before
        else:
            # Its keys go to their next preference, not anywhere.
            assert rest.first(key) == next(r for r in full.preference(key) if r != gone)


def test_balance_with_virtual_nodes() -> None:
    members = [f"10.0.0.{i}:8000" for i in range(8)]
    ring = HashRing(members)
    counts = Counter(ring.first(k * 0x9E3779B97F4A7C15 % 2**64) for k in range(80_000))
    assert max(counts.values()) / (80_000 / 8) < 1.15


def test_empty_ring() -> None:
    ring = HashRing([])
    assert ring.first(5) is None
    assert list(ring.preference(5)) == []
