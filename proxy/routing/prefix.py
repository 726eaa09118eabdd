"""The default policy: content key -> hash ring -> bounded loads -> sticky memory of spills.

For a request with key k (a content key, or the hash of its X-Routing-Key header):
1. sticky: if k spilled before and the replica it went to can take it without being
   overloaded, go there again: its KV cache holds the conversation (reason ``sticky``);
2. otherwise walk k's ring preference order over the pool's members and take the first
   candidate that is not overloaded: the owner itself (``affinity`` / ``explicit_key``) or a
   later one (``spill``, remembered in the sticky LRU).
Overloaded means above BOTH ``load_factor`` x the candidates' mean in-flight (this request
included) AND ``load_slack`` requests over the least-loaded candidate: a group of G rollouts
arriving together stays together on a quiet fleet; a busy fleet stays balanced.
A request without a key goes to the least-loaded candidate (``no_key``). A batch with several
prompts follows the key whose owner most of its prompts share.
Cost: O(candidates) for the load figures plus O(log(points)) for the ring lookup.
"""

from __future__ import annotations

from collections import Counter, OrderedDict
from collections.abc import Sequence
from operator import attrgetter

import xxhash

from proxy.routing.hashring import HashRing
from proxy.routing.keys import KeyBuilder
from proxy.routing.least_loaded import least_loaded
from proxy.routing.peek import Peek
from proxy.routing.policy import Candidate, Decision, RouteRequest, Snapshot
from proxy.routing.settings import PrefixSettings


class PrefixPolicy:
    name = "prefix"

    def __init__(self, settings: PrefixSettings | None = None) -> None:
        self.settings = settings or PrefixSettings()
        s = self.settings
        self.keys = KeyBuilder(s.key_settings())
        self._ring = HashRing((), s.vnodes)
        self._sticky: OrderedDict[int, str] = OrderedDict()

    def route_keys(self, peek: Peek, model: str | None) -> tuple[int, ...]:
        return self.keys.keys(peek, model)

    def stats(self) -> dict[str, int]:
        return {
            "tracked_prefixes": self.keys.tracked,
            "templates": self.keys.templates,
            "sticky_keys": len(self._sticky),
        }

    def ring_for(self, members: tuple[str, ...]) -> HashRing:
        """The ring over ``members``, rebuilt only when membership changes."""
        if members != self._ring.ids:
            self._ring = HashRing(members, self.settings.vnodes)
        return self._ring

    def select(self, snapshot: Snapshot, request: RouteRequest) -> Decision:
        candidates = snapshot.candidates
        ring = self.ring_for(snapshot.members)
        if request.routing_key is not None:
            key, reason = xxhash.xxh64_intdigest(request.routing_key.encode()), "explicit_key"
        elif request.keys:
            key, reason = self._majority(ring, request.keys), "affinity"
        else:
            return Decision(least_loaded(candidates).id, "no_key")
        return self._place(ring, candidates, key, reason)

    def _majority(self, ring: HashRing, keys: tuple[int, ...]) -> int:
        if len(keys) == 1:
            return keys[0]
        owners = Counter(ring.first(key) for key in keys)
        winner = owners.most_common(1)[0][0]
        return next(key for key in keys if ring.first(key) == winner)

    def _place(
        self, ring: HashRing, candidates: Sequence[Candidate], key: int, reason: str
    ) -> Decision:
        loads = list(map(_inflight, candidates))
        mean = (sum(loads) + 1) / len(loads)
        bound = max(self.settings.load_factor * mean, min(loads) + self.settings.load_slack)

        home = self._sticky.get(key)
        owner = ring.first(key)
        if home is not None:
            load = _load_of(candidates, loads, home)
            if load is not None and load < bound + self.settings.load_slack:
                self._sticky.move_to_end(key)
                return Decision(home, reason if home == owner else "sticky")
        load = _load_of(candidates, loads, owner)
        if owner is not None and load is not None and load < bound:
            self._remember(key, owner)
            return Decision(owner, reason)
        for rid in ring.preference(key):
            load = _load_of(candidates, loads, rid)
            if rid != owner and load is not None and load < bound:
                self._remember(key, rid)
                return Decision(rid, "spill")
        return Decision(least_loaded(candidates).id, "spill")

    def _remember(self, key: int, rid: str) -> None:
        if self.settings.sticky_size == 0:
            return
        self._sticky[key] = rid
        self._sticky.move_to_end(key)
        if len(self._sticky) > self.settings.sticky_size:
            self._sticky.popitem(last=False)


_inflight = attrgetter("inflight")


def _load_of(candidates: Sequence[Candidate], loads: list[int], rid: str | None) -> int | None:
    """The in-flight count of candidate ``rid``, or None when it is not a candidate."""
    for candidate, load in zip(candidates, loads, strict=True):
        if candidate.id == rid:
            return load
    return None
