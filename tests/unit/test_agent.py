"""One reconciler per replica (``proxy.adapters.agent``): it acts on the spec as it is when it
looks, unloads before loads, on its own replica only, writes only its replica's status, keeps a
failed command waiting for its retry, lets a load that needs a slot on a full replica wait for the
unload that frees it (and no other load), and answers an admission only once its replica holds
the window.

A fake carrier stands for the replica's control plane (a gate per call holds a command the way a
frozen replica would); the spec is a real ``Spec`` over a real ``Registry``; the served-policy
check is scripted."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, cast

from proxy.adapters.agent import RETRY, Agent, Tools
from proxy.adapters.attest.check import ServedPolicyCheck
from proxy.adapters.attest.verdict import Verdict
from proxy.adapters.carry import Carrier, LoadOutcome
from proxy.adapters.registry import Registry, Version
from proxy.adapters.spec import Spec
from proxy.adapters.status import ReplicaStatus, Statuses
from proxy.fleet.pool import ReplicaPool
from proxy.fleet.replica import Listing, Replica
from proxy.runs.table import Runs
from tests.support.clock import FakeClock
from tests.support.waiting import wait_for

WAIT_S = 0.2  # how long a blocked step is watched for a move it must not make
BOUND_S = 5.0


def version(n: int) -> Version:
    return Version(f"trl-policy-v{n}", f"/lora/trl-policy-v{n}", "client")


@dataclass
class FakeCarrier:
    """Records each call as (replica id, verb, name); ``gates`` hold a call until set;
    ``unloads`` scripts an unload's answers (True: done) per name, then True."""

    clock: FakeClock
    calls: list[tuple[str, str, str]] = field(default_factory=list)
    gates: dict[tuple[str, str], asyncio.Event] = field(default_factory=dict)
    unloads: dict[str, list[bool]] = field(default_factory=dict)
    loads_fail: set[str] = field(default_factory=set)
    pusher: Any = None

    def deadline(self) -> float:
        return self.clock.monotonic() + 60

    def push(self, version: Version, targets: list[Replica]) -> dict[str, Any]:
        return {}

    async def _call(self, replica: Replica, verb: str, name: str) -> None:
        self.calls.append((replica.id, verb, name))
        gate = self.gates.get((replica.id, verb))
        if gate is not None:
            await gate.wait()

    async def unload(self, replica: Replica, name: str) -> bool:
        await self._call(replica, "unload", name)
        answers = self.unloads.get(name)
        return answers.pop(0) if answers else True

    async def deliver(
        self, replica: Replica, version: Version, deadline: float, **kwargs: Any
    ) -> LoadOutcome:
        await self._call(replica, "load", version.name)
        if version.name in self.loads_fail:
            return LoadOutcome(replica, "failed")
        return LoadOutcome(replica, "ok", None, 1, at=version.where)


class ScriptedCheck:
    """The served-policy check, scripted: off unless ``probing``; ``answers`` per version."""

    def __init__(self) -> None:
        self.probing = False
        self.answers: dict[str, list[Verdict | None]] = {}
        self.withheld_from: list[str] = []
        self.registry: Registry | None = None

    def checks(self, status: ReplicaStatus, fleet: Iterable[Any]) -> list[Version]:
        """Each held version not judged yet (what ``attest.check`` judges is its own test's)."""
        if not self.probing or self.registry is None:
            return []
        return [v for n, v in self.registry.versions.items()
                if status.same(v) and n not in status.verdicts]  # fmt: skip

    async def verify(
        self, replica: Replica, version: Version, fleet: Iterable[Any]
    ) -> Verdict | None:
        scripted = self.answers.get(version.name)
        return scripted.pop(0) if scripted else Verdict.OK

    def withheld(self, replica: Replica, version: Version) -> None:
        self.withheld_from.append(version.name)

    def servable(
        self, name: str, version: Version | None, verdict: Verdict | None, held: Iterable[Any]
    ) -> bool:
        return not self.probing or verdict in (Verdict.OK, Verdict.UNCHECKED)


@dataclass
class Fleet:
    agents: list[Agent]
    registry: Registry
    carrier: FakeCarrier
    check: ScriptedCheck
    waits: list[float]


@asynccontextmanager
async def fleet(n: int, max_loras: int | None = None) -> AsyncIterator[Fleet]:
    """``n`` replicas with an agent each; ``max_loras``: what each reports (None: nothing)."""
    clock = FakeClock()
    pool = ReplicaPool([f"http://127.0.0.1:{9000 + i}" for i in range(n)], clock=clock)
    registry, carrier, check = Registry(Runs()), FakeCarrier(clock), ScriptedCheck()
    waits: list[float] = []
    check.registry = registry
    statuses = Statuses()

    async def listing(replica: Replica) -> dict[str, str]:
        return dict(replica.adapters)  # the replica lists what it was told to load

    tools = Tools(
        Spec(registry, has_source=False), statuses, cast(Carrier, carrier),
        cast(ServedPolicyCheck, check), pool, listing, waits.append, _raise,
    )  # fmt: skip
    made = []
    for replica in pool:
        if max_loras is not None:
            info = {"vllm_config": {"lora_config": {"max_loras": max_loras}}}
            replica.listing = Listing("base", None, (), info)
        pool.admit(replica)
        made.append(Agent(replica, statuses.new(replica), tools))
    tasks = [asyncio.create_task(agent.run()) for agent in made]
    try:
        yield Fleet(made, registry, carrier, check, waits)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def _raise(task: str, exc: BaseException) -> None:
    raise AssertionError(f"{task} failed: {exc!r}")


async def settle(*all_agents: Agent) -> None:
    async with asyncio.timeout(BOUND_S):
        for agent in all_agents:
            await agent.idle.wait()


async def holding(agent: Agent, name: str) -> None:
    for _ in range(1000):
        if agent.status.holds(name):
            return
        await asyncio.sleep(0.001)
    raise AssertionError(f"{agent.replica.id} never loaded {name}")


def wake(*all_agents: Agent) -> None:
    for agent in all_agents:
        agent.wake()


def mine(f: Fleet, agent: Agent) -> list[tuple[str, str]]:
    return [(verb, name) for rid, verb, name in f.carrier.calls if rid == agent.replica.id]


async def test_a_load_that_needs_the_slot_waits_for_the_unload_that_frees_it() -> None:
    """The plan's one ordering rule, per replica: on a full replica (max_loras 1) the next
    version's load waits for the unload of the last one, on that replica only."""
    async with fleet(2, max_loras=1) as f:
        a, b = f.agents
        f.registry.add(version(1))
        wake(a, b)
        await holding(a, "trl-policy-v1")
        await holding(b, "trl-policy-v1")
        f.carrier.gates[(a.replica.id, "unload")] = gate = asyncio.Event()
        f.registry.remove("trl-policy-v1")  # TRL's unload, then its next load
        f.registry.add(version(2))
        wake(a, b)
        await holding(b, "trl-policy-v2")  # replica b goes on: nothing of a's holds it up
        await asyncio.sleep(WAIT_S)
        assert ("load", "trl-policy-v2") not in mine(f, a)  # a: the unload frees its slot first
        gate.set()
        await holding(a, "trl-policy-v2")
        await settle(a, b)
        for agent in (a, b):
            assert mine(f, agent) == [
                ("load", "trl-policy-v1"),
                ("unload", "trl-policy-v1"),
                ("load", "trl-policy-v2"),
            ]


async def test_a_failed_unload_waits_for_its_retry_and_a_load_with_room_does_not_wait() -> None:
    """A failed unload waits in the retry queue (its backoff); a load that fits (max_loras 2)
    goes at once; on a full replica (max_loras 1) the load waits for the unload's retry."""
    room = await _failed_unload_then_load(max_loras=2)
    assert room == [("load", 1), ("unload", 1), ("load", 2), ("unload", 1)]
    full = await _failed_unload_then_load(max_loras=1)
    assert full == [("load", 1), ("unload", 1), ("unload", 1), ("load", 2)]


async def _failed_unload_then_load(max_loras: int) -> list[tuple[str, int]]:
    async with fleet(1, max_loras=max_loras) as f:
        (a,) = f.agents
        f.registry.add(version(1))
        a.wake()
        await holding(a, "trl-policy-v1")
        f.carrier.unloads["trl-policy-v1"] = [False]  # vLLM answers 500 once
        f.registry.remove("trl-policy-v1")
        f.registry.add(version(2))
        a.wake()
        await settle(a)
        assert a.parked_unloads() == 1
        assert a.status.holds("trl-policy-v2") is (max_loras > 1)
        f.carrier.clock.advance(RETRY.first_s)  # its backoff: the retry's timer fires
        await wait_for(lambda: a.parked_unloads() == 0, BOUND_S, "the unload's retry")
        await holding(a, "trl-policy-v2")
        await settle(a)
        assert not a.status.holds("trl-policy-v1")
        return [(verb, int(name.rsplit("v", 1)[1])) for verb, name in mine(f, a)]


async def test_what_changed_while_it_was_busy_is_acted_on_as_it_stands() -> None:
    """Level-triggered: a load and the unload of the same name, both while the agent is busy,
    cost the replica nothing; only the state as it stands when the agent looks is acted on."""
    async with fleet(1) as f:
        (a,) = f.agents
        f.carrier.gates[(a.replica.id, "load")] = gate = asyncio.Event()
        f.registry.add(version(1))
        a.wake()
        for _ in range(20):
            await asyncio.sleep(0)
        for n in range(2, 12):  # ten versions come and go while v1's load is held
            f.registry.add(version(n))
            f.registry.remove(f"trl-policy-v{n}")
            a.wake()
        gate.set()
        await settle(a)
        assert mine(f, a) == [("load", "trl-policy-v1")]


async def test_each_command_s_end_is_written_to_the_status_and_nothing_else() -> None:
    """The status is the agent's only output: a load's outcome is its condition there (with the
    files it was for and the command count), an unload counts as a command for the name."""
    async with fleet(1) as f:
        (a,) = f.agents
        f.carrier.loads_fail.add("trl-policy-v2")
        f.registry.add(version(1))
        f.registry.add(version(2))
        a.wake()
        await settle(a)
        ok = a.status.condition(version(1), 0)
        failed = a.status.condition(version(2), 0)
        assert ok is not None and ok.outcome.status == "ok" and ok.count == 1
        assert failed is not None and failed.outcome.status == "failed"
        assert a.status.condition(version(2), failed.count) is None  # nothing newer
        f.registry.remove("trl-policy-v1")
        a.wake()
        await settle(a)
        assert a.status.count("trl-policy-v1") == 2 and not a.status.holds("trl-policy-v1")


async def test_an_admission_answers_once_the_window_is_held_or_a_command_failed() -> None:
    async with fleet(1) as f:
        (a,) = f.agents
        for n in (1, 2, 3):
            f.registry.add(version(n))
        assert await asyncio.wait_for(a.admit(), BOUND_S)
        assert set(a.replica.adapters) == {f"trl-policy-v{n}" for n in (1, 2, 3)}
        f.carrier.loads_fail.add("trl-policy-v4")
        f.registry.add(version(4))
        assert not await asyncio.wait_for(a.admit(), BOUND_S)
        assert "loading adapter trl-policy-v4" in a.replica.last_error


async def test_a_probe_mismatch_loads_the_version_once_more_and_a_second_withholds_it() -> None:
    async with fleet(1) as f:
        (a,) = f.agents
        f.check.probing = True
        f.check.answers = {
            "trl-policy-v1": [Verdict.MISMATCH, Verdict.OK],
            "trl-policy-v2": [Verdict.MISMATCH] * 2,
        }
        f.registry.add(version(1))
        a.wake()
        await settle(a)
        assert a.status.verdicts == {"trl-policy-v1": "ok"}  # the reload cured it
        assert "trl-policy-v1" in a.replica.adapters
        f.registry.add(version(2))
        a.wake()
        await settle(a)
        assert a.status.verdicts["trl-policy-v2"] is Verdict.WITHHELD
        assert "trl-policy-v2" not in a.replica.adapters  # held, never routed
        assert f.check.withheld_from == ["trl-policy-v2"]
        assert mine(f, a) == [
            ("load", "trl-policy-v1"),
            ("unload", "trl-policy-v1"),  # the one retry: unload, then load
            ("load", "trl-policy-v1"),
            ("load", "trl-policy-v2"),
            ("unload", "trl-policy-v2"),
            ("load", "trl-policy-v2"),  # and no third
        ]
        assert len(f.waits) == 2  # one wait per version, from its first load


async def test_a_version_is_not_routed_before_its_probe_and_a_failed_probe_is_retried() -> None:
    async with fleet(1) as f:
        (a,) = f.agents
        f.check.probing = True
        f.check.answers = {"trl-policy-v1": [None]}  # the probe's own deadline passed
        f.registry.add(version(1))
        a.wake()
        await settle(a)
        assert a.status.holds("trl-policy-v1") and "trl-policy-v1" not in a.replica.adapters
        f.carrier.clock.advance(60)  # past its backoff
        a.wake()
        await settle(a)
        assert a.status.verdicts == {"trl-policy-v1": "ok"}
        assert "trl-policy-v1" in a.replica.adapters
        assert mine(f, a) == [("load", "trl-policy-v1")]
