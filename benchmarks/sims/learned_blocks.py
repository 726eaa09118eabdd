"""Baseline policy ``learned_blocks``, reimplemented from the published write-up's description.

Remember which replica served each 16-token chained block; a block followed by >= 2 different
blocks is template; go to the replica with the longest non-template match unless it is more than
8 in-flight requests ahead of the least loaded, else the least loaded. It parses every prompt
and hashes every block: its cost grows with the prompt (which is why it is a baseline).
"""

from __future__ import annotations

import itertools
from array import array

import orjson
import xxhash

from proxy.routing.peek import Peek
from proxy.routing.policy import Candidate, Decision, RouteKeys, RouteRequest, Snapshot

BLOCK = 16
SLACK = 8


class LearnedBlocks:
    name = "learned_blocks"

    def __init__(self) -> None:
        self._owner: dict[int, str] = {}
        self._next: dict[int, set[int]] = {}

    def route_keys(self, peek: Peek, model: str | None) -> RouteKeys:
        if peek.kind != "tokens":
            return (), None
        tokens = orjson.loads(peek.buffer[peek.start : peek.end])
        packed = array("q", tokens).tobytes()
        hashes, parent = [], 0
        for start in range(0, (len(tokens) // BLOCK) * BLOCK * 8, BLOCK * 8):
            parent = xxhash.xxh64_intdigest(packed[start : start + BLOCK * 8], parent)
            hashes.append(parent)
        return tuple(hashes), None

    def select(self, snapshot: Snapshot, request: RouteRequest) -> Decision:
        candidates = snapshot.candidates
        least = min(candidates, key=_inflight)  # as published: in-flight request counts
        blocks = request.keys
        owner = None
        for block in blocks:
            if len(self._next.get(block, ())) >= 2:
                continue  # template: says nothing about where this conversation lives
            if block not in self._owner:
                break
            owner = self._owner[block]
        by_id = {c.id: c for c in candidates}
        chosen, reason = least.id, "no_key"
        if owner in by_id and by_id[owner].inflight - least.inflight <= SLACK:
            chosen, reason = owner, "affinity"
        elif owner is not None:
            reason = "spill"
        for previous, block in itertools.pairwise(blocks):
            followers = self._next.setdefault(previous, set())
            if len(followers) < 2:
                followers.add(block)
        for block in blocks:
            self._owner[block] = chosen
        return Decision(chosen, reason)

    def stats(self) -> dict[str, int]:
        return {"blocks": len(self._owner)}


def _inflight(candidate: Candidate) -> int:
    return candidate.inflight
