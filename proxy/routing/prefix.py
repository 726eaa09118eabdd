"""The default policy: content key -> hash ring -> bounded loads -> memory of where keys went.

For a request with key k (a content key, or the hash of its X-Routing-Key header):
0. hint: while no template is confirmed, every prompt behind it shares one key k; a prompt's
   hint (``routing.keys``: its prefix shared with recent traffic plus its next block) recalls
   where that longer prefix went, and is followed first under the same rule as a home (below):
   a group's rollouts and its later turns stay with their first request, not with wherever k
   went last. Every placement of a hinted request is remembered under its hint too;
1. home: if k was placed before and its replica (where its KV now lives) is not overloaded even
   with one more ``load_slack``, go there again (reason ``affinity`` / ``explicit_key`` when that
   is k's ring owner, ``sticky`` when k had spilled): the G rollouts of a group arriving together
   and every later turn of a conversation follow the first;
2. otherwise walk k's ring preference order over the pool's members and take the first
   candidate that is not overloaded: the owner itself (``affinity`` / ``explicit_key``) or a
   later one (``spill``), remembered as k's new home (a bounded LRU of ``sticky_size`` keys).
Loads are estimated work in flight (``routing.cost``: the proxy's own cost estimate of each
request plus what the replica reports). Overloaded means above BOTH ``load_factor`` x the mean
load (this request included) AND ``load_slack`` requests' worth over the least-loaded
candidate, or the replica reports itself full (a queue, or its KV cache nearly used up) while
another candidate does not: a group arriving together stays together on a quiet fleet; a busy
fleet stays balanced on work, not request counts.
A request without a key goes to the least-loaded candidate (``no_key``). A batch with several
prompts follows the key whose owner most of its prompts share.
Cost: O(candidates) for the load figures plus O(log(points)) for the ring lookup.
"""

from __future__ import annotations

from collections import Counter, OrderedDict
from collections.abc import Sequence

import xxhash

from proxy.routing.cost import Loads, measure
from proxy.routing.hashring import HashRing
from proxy.routing.keys import KeyBuilder
from proxy.routing.peek import Peek
from proxy.routing.policy import Candidate, Decision, RouteKeys, RouteRequest, Snapshot
from proxy.routing.settings import PrefixSettings


class PrefixPolicy:
    name = "prefix"

    def __init__(self, settings: PrefixSettings | None = None) -> None:
        self.settings = settings or PrefixSettings()
        s = self.settings
        self.keys = KeyBuilder(s.key_settings())
        self._ring = HashRing((), s.vnodes)
        self._sticky: OrderedDict[int, str] = OrderedDict()

    def route_keys(self, peek: Peek, model: str | None) -> RouteKeys:
        return self.keys.keyed(peek, model)

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
        loads = measure(candidates, request.cost)
        if request.routing_key is not None:
            key, reason = xxhash.xxh64_intdigest(request.routing_key.encode()), "explicit_key"
        elif request.keys:
            key, reason = self._majority(ring, request.keys), "affinity"
            hint = request.hint
            if hint is not None:
                decision = self._place(ring, candidates, loads, key, reason, hint)
                self._remember(hint, decision.replica_id)
                return decision
        else:
            return Decision(candidates[loads.least()].id, "no_key")
        return self._place(ring, candidates, loads, key, reason)

    def _majority(self, ring: HashRing, keys: tuple[int, ...]) -> int:
        if len(keys) == 1:
            return keys[0]
        owners = Counter(ring.first(key) for key in keys)
        winner = owners.most_common(1)[0][0]
        return next(key for key in keys if ring.first(key) == winner)

    def _place(
        self,
        ring: HashRing,
        candidates: Sequence[Candidate],
        loads: Loads,
        key: int,
        reason: str,
        hint: int | None = None,
    ) -> Decision:
        settings = self.settings
        slack = settings.load_slack * loads.unit
        bound = max(settings.load_factor * loads.mean, min(loads.values) + slack)

        owner = ring.first(key)
        if hint is not None:
            home = self._sticky.get(hint)
            if home is not None:
                at = _position(candidates, home)
                if at >= 0 and loads.takes(at, bound + slack):
                    return Decision(home, reason if home == owner else "sticky")
        home = self._sticky.get(key)
        if home is not None:
            at = _position(candidates, home)
            if at >= 0 and loads.takes(at, bound + slack):
                self._sticky.move_to_end(key)
                return Decision(home, reason if home == owner else "sticky")
        if owner is not None and owner != home:
            at = _position(candidates, owner)
            if at >= 0 and loads.takes(at, bound):
                self._remember(key, owner)
                return Decision(owner, reason)
        for rid in ring.preference(key):
            at = _position(candidates, rid)
            if rid != owner and at >= 0 and loads.takes(at, bound):
                self._remember(key, rid)
                return Decision(rid, "spill")
        chosen = candidates[loads.least()].id
        self._remember(key, chosen)
        return Decision(chosen, "spill")

    def _remember(self, key: int, rid: str) -> None:
        if self.settings.sticky_size == 0:
            return
        self._sticky[key] = rid
        self._sticky.move_to_end(key)
        if len(self._sticky) > self.settings.sticky_size:
            self._sticky.popitem(last=False)


def _position(candidates: Sequence[Candidate], rid: str) -> int:
    """Where candidate ``rid`` is, or -1 (a short linear scan: fleets are small)."""
    for i, candidate in enumerate(candidates):
        if candidate.id == rid:
            return i
    return -1
