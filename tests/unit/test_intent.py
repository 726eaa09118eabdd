"""A fleet load's intent settles as a pure function of the replicas' statuses and its deadline
(``proxy.adapters.intent``); the plan's one ordering rule (``spec.runnable``); the retry queue
(``retries``). No agent, no I/O: statuses are written by hand as an agent writes them."""

from __future__ import annotations

import asyncio

from proxy.adapters.carry import LoadOutcome, Status
from proxy.adapters.intent import Intent
from proxy.adapters.registry import Load, Unload, Version
from proxy.adapters.retries import RetryQueue
from proxy.adapters.spec import runnable
from proxy.adapters.status import Statuses
from proxy.clock import Backoff
from proxy.fleet.replica import Replica

V1 = Version("trl-policy-v1", "/lora/trl-policy-v1", "client")
V1_OTHER = Version("trl-policy-v1", "/lora/elsewhere/trl-policy-v1", "client")


def replicas(n: int) -> tuple[Replica, ...]:
    return tuple(Replica(f"127.0.0.1:{9000 + i}", f"http://127.0.0.1:{9000 + i}") for i in range(n))


async def intent_over(n: int) -> tuple[Intent, Statuses, tuple[Replica, ...]]:
    statuses, targets = Statuses(), replicas(n)
    for replica in targets:
        statuses.new(replica)
    counts = Intent.counts(statuses, targets, V1.name)
    done: asyncio.Future[list[LoadOutcome]] = asyncio.get_running_loop().create_future()
    return Intent(V1, None, targets, counts, 60.0, 0.0, done), statuses, targets


def loaded(statuses: Statuses, replica: Replica, status: Status, version: Version = V1) -> None:
    record = statuses.get(replica.id)
    assert record is not None
    record.ended(version.name, (version, LoadOutcome(replica, status, None, 1)))


def ids(targets: tuple[Replica, ...]) -> set[str]:
    return {r.id for r in targets}


async def test_it_is_answered_once_every_target_s_status_shows_an_outcome() -> None:
    intent, statuses, (a, b) = await intent_over(2)
    routable = ids((a, b))
    assert not intent.settle(statuses, routable, superseded=False)
    loaded(statuses, a, "ok")
    assert not intent.settle(statuses, routable, superseded=False)
    loaded(statuses, b, "ok", V1_OTHER)  # a load of other files is not this intent's
    assert not intent.settle(statuses, routable, superseded=False)
    loaded(statuses, b, "failed")
    assert intent.settle(statuses, routable, superseded=False)
    assert [o.status for o in intent.ordered()] == ["ok", "failed"] and not intent.ok


async def test_the_first_outcome_counts_and_what_came_before_the_intent_does_not() -> None:
    statuses, (a,) = Statuses(), replicas(1)
    statuses.new(a)
    loaded(statuses, a, "failed")  # before the intent began
    done: asyncio.Future[list[LoadOutcome]] = asyncio.get_running_loop().create_future()
    intent = Intent(V1, None, (a,), Intent.counts(statuses, (a,), V1.name), 60.0, 0.0, done)
    assert not intent.settle(statuses, {a.id}, superseded=False)
    loaded(statuses, a, "ok")
    assert intent.settle(statuses, {a.id}, superseded=False)
    loaded(statuses, a, "failed")  # a later load changes nothing once settled
    intent.settle(statuses, {a.id}, superseded=False)
    assert intent.ok


async def test_out_of_routing_is_unreachable_and_a_readmitted_target_still_answers() -> None:
    """With every target unreachable it waits (a blip) until one comes back or the deadline."""
    intent, statuses, (a, _) = await intent_over(2)
    assert not intent.settle(statuses, set(), superseded=False)  # all out: wait
    assert not intent.settle(statuses, {a.id}, superseded=False)  # a back, not answered yet
    loaded(statuses, a, "ok")
    assert intent.settle(statuses, {a.id}, superseded=False)  # b out: unreachable, a took it
    assert [o.status for o in intent.ordered()] == ["ok", "unreachable"] and intent.ok


async def test_the_deadline_makes_every_silent_target_unreachable() -> None:
    intent, statuses, (a, b) = await intent_over(2)
    loaded(statuses, a, "ok")
    assert not intent.settle(statuses, ids((a, b)), superseded=False)
    intent.expire()
    assert intent.settle(statuses, ids((a, b)), superseded=False)
    assert intent.late() == [b]


async def test_an_unload_of_its_name_supersedes_it_for_the_targets_that_had_not_answered() -> None:
    intent, statuses, (a, b) = await intent_over(2)
    loaded(statuses, a, "ok")
    assert intent.settle(statuses, ids((a, b)), superseded=True)
    assert [o.status for o in intent.ordered()] == ["ok", "superseded"] and intent.ok


async def test_a_rollback_is_done_once_each_owing_target_carried_a_command_or_left() -> None:
    intent, statuses, (a, b) = await intent_over(2)
    intent.rolled_back(statuses, [a, b])
    owes = {a.id: True, b.id: True}
    routable = ids((a, b))
    assert not intent.undone(statuses, routable, lambda s: owes[s.replica_id])
    record = statuses.get(a.id)
    assert record is not None
    record.ended(V1.name)  # a carried out the unload
    assert not intent.undone(statuses, routable, lambda s: owes[s.replica_id])
    assert intent.undone(statuses, {a.id}, lambda s: owes[s.replica_id])  # b left routing


def test_a_load_that_needs_a_slot_on_a_full_replica_waits_for_the_unload_only() -> None:
    """The plan's one ordering rule: vLLM evicts a live adapter when a load finds it full."""
    unload, load, replace = Unload("old"), Load(V1), Load(V1_OTHER, replace=True)

    def always(command: object) -> bool:
        return True

    def not_unload(command: object) -> bool:
        return command is not unload  # the unload waits for its retry

    assert runnable([unload, load], free=0, ready=not_unload) is None  # full: load waits
    assert runnable([unload, load], free=1, ready=not_unload) is load  # room: it goes
    assert runnable([unload, load], free=None, ready=not_unload) is load  # unknown: it goes
    assert runnable([unload, replace], free=0, ready=not_unload) is replace  # no new slot
    assert runnable([load], free=0, ready=always) is load  # no unload to wait for
    assert runnable([unload, load], free=0, ready=always) is unload


def test_a_failed_item_waits_its_growing_backoff_and_success_forgets_it() -> None:
    queue: RetryQueue[str] = RetryQueue(Backoff(first_s=1.0, max_s=4.0))
    assert queue.ready("x", 0.0) and queue.due() is None
    queue.failed("x", 0.0)
    assert not queue.ready("x", 0.5) and queue.ready("x", 1.0)
    queue.failed("x", 1.0)
    queue.failed("x", 3.0)
    assert queue.due() == 7.0  # 1, 2, then 4 (the cap)
    queue.forget("x")
    assert queue.ready("x", 3.0) and not len(queue)
