"""A consistent hash ring over replica ids, with virtual nodes. It knows ids, nothing else.

Each id owns ``vnodes`` points ``xxh64(f"{id}#{i}")`` on a 64-bit circle. A key's preference
order is the sequence of distinct ids met walking clockwise from the key's point. Adding or
removing one id moves only the keys whose first preference was (or becomes) that id.
Cost: build O(n·v log(n·v)); ``first`` O(log(n·v)); ``preference`` O(log(n·v) + points walked).
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Iterator

import xxhash

DEFAULT_VNODES = 160


class HashRing:
    __slots__ = ("_ids", "_owners", "_points")

    def __init__(self, ids: Iterable[str], vnodes: int = DEFAULT_VNODES) -> None:
        self._ids = tuple(dict.fromkeys(ids))
        placed = sorted(
            (xxhash.xxh64_intdigest(f"{rid}#{i}".encode()), rid)
            for rid in self._ids
            for i in range(vnodes)
        )
        self._points = [point for point, _ in placed]
        self._owners = [rid for _, rid in placed]

    @property
    def ids(self) -> tuple[str, ...]:
        return self._ids

    def __len__(self) -> int:
        return len(self._ids)

    def first(self, key: int) -> str | None:
        """The id owning ``key`` (the first point clockwise from it)."""
        if not self._points:
            return None
        index = bisect.bisect_left(self._points, key)
        return self._owners[index % len(self._owners)]

    def preference(self, key: int) -> Iterator[str]:
        """Distinct ids in clockwise order from ``key``: the key's order of preference."""
        owners = self._owners
        if not owners:
            return
        start = bisect.bisect_left(self._points, key)
        seen: set[str] = set()
        total = len(owners)
        for step in range(total):
            rid = owners[(start + step) % total]
            if rid not in seen:
                seen.add(rid)
                yield rid
                if len(seen) == len(self._ids):
                    return
