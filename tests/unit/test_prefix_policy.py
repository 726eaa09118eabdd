"""The prefix policy: affinity, even spread, minimal movement, bounded loads, sticky spills."""

from __future__ import annotations

import random
from collections import Counter

from proxy.routing.policy import RouteRequest, Snapshot
from proxy.routing.prefix import PrefixPolicy
from proxy.routing.settings import PrefixSettings
from tests.support.candidates import Fake, Report


def fleet(n: int) -> list[Fake]:
    return [Fake(f"10.0.0.{i}:8000") for i in range(n)]


def place(policy: PrefixPolicy, replicas: list[Fake], key: int, *, hold: bool = False) -> str:
    snapshot = Snapshot(replicas, tuple(r.id for r in replicas))
    decision = policy.select(snapshot, RouteRequest("m", None, (key,)))
    if hold:
        next(r for r in replicas if r.id == decision.replica_id).inflight += 1
    return decision.replica_id


def test_same_key_same_replica_on_a_quiet_fleet() -> None:
    policy, replicas = PrefixPolicy(), fleet(4)
    assert len({place(policy, replicas, 12345) for _ in range(20)}) == 1


def test_a_group_arriving_together_stays_together() -> None:
    policy, replicas = PrefixPolicy(), fleet(4)
    homes = {place(policy, replicas, 777, hold=True) for _ in range(8)}
    assert len(homes) == 1


def test_different_keys_spread_evenly() -> None:
    policy, replicas = PrefixPolicy(), fleet(8)
    rng = random.Random(1)
    counts = Counter(place(policy, replicas, rng.getrandbits(64)) for _ in range(40_000))
    expected = 40_000 / 8
    chi2 = sum((c - expected) ** 2 / expected for c in counts.values())
    assert max(counts.values()) / expected < 1.15
    assert chi2 < 2000  # far from uniform would be in the tens of thousands


def test_removing_a_replica_moves_only_its_keys() -> None:
    policy, replicas = PrefixPolicy(), fleet(5)
    rng = random.Random(2)
    keys = [rng.getrandbits(64) for _ in range(5000)]
    before = {k: place(policy, replicas, k) for k in keys}
    gone = replicas.pop(2)
    after = {k: place(policy, replicas, k) for k in keys}
    moved = [k for k in keys if before[k] != after[k]]
    assert moved
    assert all(before[k] == gone.id for k in moved)


def test_bounded_loads_hold_under_a_burst() -> None:
    settings = PrefixSettings(load_factor=1.25, load_slack=8)
    policy, replicas = PrefixPolicy(settings), fleet(4)
    # 400 requests of ONE key arrive at once: the owner takes what the bound allows, the rest
    # spill, and no replica ends above both bounds by more than the slack a key's home keeps
    # (so a group arriving together is not split by its own arrival).
    for _ in range(400):
        place(policy, replicas, 4242, hold=True)
        loads = [r.inflight for r in replicas]
        mean = sum(loads) / len(loads)
        assert max(loads) <= max(1.25 * mean, min(loads) + 8) + 8 + 1


def test_sticky_memory_sends_continuations_where_the_group_spilled() -> None:
    policy, replicas = PrefixPolicy(PrefixSettings(load_slack=2, load_factor=1.0)), fleet(3)
    key = 99
    owner = place(policy, replicas, key)
    by_id = {r.id: r for r in replicas}
    by_id[owner].inflight = 10  # the owner is busy: the group spills
    spilled = place(policy, replicas, key)
    assert spilled != owner
    assert (
        policy.select(Snapshot(replicas, tuple(by_id)), RouteRequest("m", None, (key,))).reason
        == "sticky"
    )
    by_id[owner].inflight = 0  # the owner is free again, the continuation follows its KV
    assert place(policy, replicas, key) == spilled


def test_explicit_key_and_no_key() -> None:
    policy, replicas = PrefixPolicy(), fleet(3)
    snapshot = Snapshot(replicas, tuple(r.id for r in replicas))
    a = policy.select(snapshot, RouteRequest("m", "session-1"))
    b = policy.select(snapshot, RouteRequest("m", "session-1", (1, 2)))
    assert a.reason == "explicit_key"
    assert a.replica_id == b.replica_id
    replicas[0].inflight = 5
    assert policy.select(snapshot, RouteRequest("m")).reason == "no_key"
    assert policy.select(snapshot, RouteRequest("m")).replica_id != replicas[0].id


def test_only_candidates_are_chosen() -> None:
    policy, replicas = PrefixPolicy(), fleet(4)
    members = tuple(r.id for r in replicas)
    rng = random.Random(3)
    for _ in range(500):
        candidates = rng.sample(replicas, rng.randint(1, 4))
        decision = policy.select(
            Snapshot(candidates, members), RouteRequest("m", None, (rng.getrandbits(64),))
        )
        assert decision.replica_id in {c.id for c in candidates}


def owner_of(policy: PrefixPolicy, replicas: list[Fake], key: int) -> Fake:
    rid = policy.ring_for(tuple(r.id for r in replicas)).first(key)
    return next(r for r in replicas if r.id == rid)


def test_a_replica_holding_long_work_is_overloaded_before_its_request_count_says_so() -> None:
    policy, replicas = PrefixPolicy(), fleet(3)
    key = 31337
    owner = owner_of(policy, replicas, key)
    for r in replicas:  # the same request count everywhere ...
        r.inflight, r.cost = 4, 4 * 500.0
    owner.cost = 4 * 8000.0  # ... but the owner's four are long generations
    request = RouteRequest("m", None, (key,), cost=500.0)
    decision = policy.select(Snapshot(replicas, tuple(r.id for r in replicas)), request)
    assert decision.replica_id != owner.id
    assert decision.reason == "spill"


def test_a_replica_reporting_itself_full_takes_no_new_work_while_another_can() -> None:
    policy, replicas = PrefixPolicy(), fleet(3)
    key = 4711
    owner = owner_of(policy, replicas, key)
    owner.reported = Report(saturated=True)
    members = tuple(r.id for r in replicas)
    decision = policy.select(Snapshot(replicas, members), RouteRequest("m", None, (key,)))
    assert decision.replica_id != owner.id
    # Every replica full: affinity decides again.
    for r in replicas:
        r.reported = Report(saturated=True)
    decision = policy.select(Snapshot(replicas, members), RouteRequest("m", None, (key + 1,)))
    assert decision.replica_id == owner_of(policy, replicas, key + 1).id


def test_requests_other_clients_sent_count_as_load() -> None:
    policy, replicas = PrefixPolicy(PrefixSettings(load_slack=2)), fleet(2)
    key = 99991
    owner = owner_of(policy, replicas, key)
    owner.reported = Report(foreign=20.0)  # busy with someone else's requests
    members = tuple(r.id for r in replicas)
    decision = policy.select(Snapshot(replicas, members), RouteRequest("m", None, (key,)))
    assert decision.replica_id != owner.id


def test_a_group_stays_on_its_home_while_the_fleet_around_it_is_busy() -> None:
    # Eight rollouts of one group arrive while every replica is near the bound: the first
    # decides, the other seven follow it (one more slack of room), not each to the least loaded.
    settings = PrefixSettings(load_factor=1.25, load_slack=8)
    policy, replicas = PrefixPolicy(settings), fleet(4)
    for r in replicas:
        r.inflight = 40
    homes = {place(policy, replicas, 5150, hold=True) for _ in range(8)}
    assert len(homes) == 1


def test_a_hint_keeps_a_group_where_it_went_while_its_key_is_shared() -> None:
    # Warm-up: every prompt shares key 1; the shared key's memory moves when its replica is
    # busy, but a group (one hint) and its later turns follow their own first request.
    policy, replicas = PrefixPolicy(PrefixSettings(load_slack=2, load_factor=1.0)), fleet(3)
    by_id = {r.id: r for r in replicas}
    snapshot = Snapshot(replicas, tuple(by_id))

    def hinted(hint: int) -> str:
        return policy.select(snapshot, RouteRequest("m", None, (1,), hint=hint)).replica_id

    first = hinted(100)
    by_id[first].inflight = 10  # the shared key's replica is busy: the next group spills
    second = hinted(200)
    assert second != first
    by_id[first].inflight = 0
    assert hinted(100) == first  # group 100 stays where its KV is
    assert hinted(200) == second
    assert hinted(300) == second  # a new group follows the shared key's memory
    assert place(policy, replicas, 1) == second  # no hint: the key alone decides, as before
