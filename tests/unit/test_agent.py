"""One reconciler per replica (``proxy.adapters.agent``): it acts on the desired state as it is
when it looks, unloads before loads, on its own replica only, retries a failed unload before a
load overtakes it, and answers an admission only once its replica holds the window.

A fake carrier stands for the replica's control plane (a gate per call holds a command the way a
frozen replica would); the desired state is a real ``Registry``."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, cast

from proxy.adapters.agent import Agent
from proxy.adapters.carry import Carrier, Outcome
from proxy.adapters.held import Held, Verdict
from proxy.adapters.intent import Intent
from proxy.adapters.policy import Found
from proxy.adapters.registry import Command, Registry, Version
from proxy.fleet.pool import ReplicaPool
from proxy.fleet.replica import Replica
from proxy.runs.table import Runs
from tests.support.clock import FakeClock

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
    ) -> Outcome:
        await self._call(replica, "load", version.name)
        if version.name in self.loads_fail:
            return Outcome(replica, "failed")
        return Outcome(replica, "ok", None, 1, at=version.where)


class Wanted:
    """The service's side of an agent, on a real registry."""

    def __init__(self) -> None:
        self.registry = Registry(Runs())
        self.carried_names: list[tuple[str, str]] = []
        self.probing = False  # the served-policy check on (its verdicts scripted in ``answers``)
        self.answers: dict[str, list[Found]] = {}
        self.withheld_from: list[str] = []
        self.waits: list[float] = []

    def plan(self, held: Held) -> list[Command]:
        return self.registry.plan(held, manage_unknown=False)

    def intent(self, name: str) -> Intent | None:
        return None

    def report(self, outcome: Outcome, version: Version) -> None:
        pass

    def inactive(self, replica: Replica) -> None:
        pass

    def observed(self, replica: Replica) -> None:
        pass

    def carried(self, replica: Replica, name: str) -> None:
        self.carried_names.append((replica.id, name))

    def checks(self, held: Held) -> list[Version]:
        """Each held version not judged yet (what ``policy`` judges is its own test's)."""
        if not self.probing:
            return []
        return [v for n, v in self.registry.versions.items()
                if held.same(v) and n not in held.verdicts]  # fmt: skip

    async def verify(self, replica: Replica, version: Version) -> Found:
        scripted = self.answers.get(version.name)
        return scripted.pop(0) if scripted else "ok"

    def withheld(self, replica: Replica, version: Version) -> None:
        self.withheld_from.append(version.name)

    def ready(self, seconds: float) -> None:
        self.waits.append(seconds)

    def servable(self, name: str, version: Version | None, verdict: Verdict | None) -> bool:
        return not self.probing or verdict in ("ok", "unchecked")


@asynccontextmanager
async def agents(n: int) -> AsyncIterator[tuple[list[Agent], Wanted, FakeCarrier]]:
    clock = FakeClock()
    pool = ReplicaPool([f"http://127.0.0.1:{9000 + i}" for i in range(n)], clock=clock)
    wanted, carrier = Wanted(), FakeCarrier(clock)

    async def listing(replica: Replica) -> dict[str, str]:
        return dict(replica.adapters)  # the replica lists what it was told to load

    made = []
    for replica in pool:
        pool.admit(replica)
        made.append(Agent(replica, wanted, cast(Carrier, carrier), pool, listing, _raise))
    tasks = [asyncio.create_task(agent.run()) for agent in made]
    try:
        yield made, wanted, carrier
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
        if agent.held.holds(name):
            return
        await asyncio.sleep(0.001)
    raise AssertionError(f"{agent.replica.id} never loaded {name}")


async def test_an_unload_goes_before_a_later_load_on_its_replica_only() -> None:
    async with agents(2) as ((a, b), wanted, carrier):
        wanted.registry.add(version(1))
        a.wake()
        b.wake()
        await holding(a, "trl-policy-v1")
        await holding(b, "trl-policy-v1")
        carrier.gates[(a.replica.id, "unload")] = gate = asyncio.Event()
        wanted.registry.remove("trl-policy-v1")  # TRL's unload, then its next load
        wanted.registry.add(version(2))
        a.wake()
        b.wake()
        await holding(b, "trl-policy-v2")  # replica b goes on: nothing of a's holds it up
        await asyncio.sleep(WAIT_S)
        assert (a.replica.id, "load", "trl-policy-v2") not in carrier.calls  # a: unload first
        gate.set()
        await holding(a, "trl-policy-v2")
        await settle(a, b)
        for agent in (a, b):
            mine = [(verb, name) for rid, verb, name in carrier.calls if rid == agent.replica.id]
            assert mine == [
                ("load", "trl-policy-v1"),
                ("unload", "trl-policy-v1"),
                ("load", "trl-policy-v2"),
            ]


async def test_a_failed_unload_is_retried_before_a_load_overtakes_it() -> None:
    async with agents(1) as ((a,), wanted, carrier):
        wanted.registry.add(version(1))
        a.wake()
        await holding(a, "trl-policy-v1")
        carrier.unloads["trl-policy-v1"] = [False]  # vLLM answers 500 once
        wanted.registry.remove("trl-policy-v1")
        a.wake()
        await settle(a)
        assert a.held.holds("trl-policy-v1") and a.parked_unloads() == 1  # parked, retried later
        wanted.registry.add(version(2))
        a.wake()
        await holding(a, "trl-policy-v2")
        await settle(a)
        verbs = [(verb, name) for _, verb, name in carrier.calls]
        assert verbs == [
            ("load", "trl-policy-v1"),
            ("unload", "trl-policy-v1"),
            ("unload", "trl-policy-v1"),  # tried again before the load, not after its backoff
            ("load", "trl-policy-v2"),
        ]
        assert not a.held.holds("trl-policy-v1") and a.parked_unloads() == 0


async def test_what_changed_while_it_was_busy_is_acted_on_as_it_stands() -> None:
    """Level-triggered: a load and the unload of the same name, both while the agent is busy,
    cost the replica nothing; only the state as it stands when the agent looks is acted on."""
    async with agents(1) as ((a,), wanted, carrier):
        carrier.gates[(a.replica.id, "load")] = gate = asyncio.Event()
        wanted.registry.add(version(1))
        a.wake()
        for _ in range(20):
            await asyncio.sleep(0)
        for n in range(2, 12):  # ten versions come and go while v1's load is held
            wanted.registry.add(version(n))
            wanted.registry.remove(f"trl-policy-v{n}")
            a.wake()
        gate.set()
        await settle(a)
        assert [(verb, name) for _, verb, name in carrier.calls] == [("load", "trl-policy-v1")]


async def test_an_admission_answers_once_the_window_is_held_or_a_command_failed() -> None:
    async with agents(1) as ((a,), wanted, carrier):
        for n in (1, 2, 3):
            wanted.registry.add(version(n))
        assert await asyncio.wait_for(a.admit(), BOUND_S)
        assert {n for n in a.replica.adapters} == {f"trl-policy-v{n}" for n in (1, 2, 3)}
        carrier.loads_fail.add("trl-policy-v4")
        wanted.registry.add(version(4))
        assert not await asyncio.wait_for(a.admit(), BOUND_S)
        assert "loading adapter trl-policy-v4" in a.replica.last_error


async def test_a_probe_mismatch_loads_the_version_once_more_and_a_second_withholds_it() -> None:
    async with agents(1) as ((a,), wanted, carrier):
        wanted.probing = True
        wanted.answers = {"trl-policy-v1": ["mismatch", "ok"], "trl-policy-v2": ["mismatch"] * 2}
        wanted.registry.add(version(1))
        a.wake()
        await settle(a)
        assert a.held.verdicts == {"trl-policy-v1": "ok"}  # the reload cured it
        assert "trl-policy-v1" in a.replica.adapters
        wanted.registry.add(version(2))
        a.wake()
        await settle(a)
        assert a.held.verdicts["trl-policy-v2"] == "withheld"
        assert "trl-policy-v2" not in a.replica.adapters  # held, never routed
        assert wanted.withheld_from == ["trl-policy-v2"]
        assert [(verb, name) for _, verb, name in carrier.calls] == [
            ("load", "trl-policy-v1"),
            ("unload", "trl-policy-v1"),  # the one retry: unload, then load
            ("load", "trl-policy-v1"),
            ("load", "trl-policy-v2"),
            ("unload", "trl-policy-v2"),
            ("load", "trl-policy-v2"),  # and no third
        ]
        assert len(wanted.waits) == 2  # one wait per version, from its first load


async def test_a_version_is_not_routed_before_its_probe_and_a_failed_probe_is_retried() -> None:
    async with agents(1) as ((a,), wanted, carrier):
        wanted.probing = True
        wanted.answers = {"trl-policy-v1": [None]}  # the probe's own deadline passed
        wanted.registry.add(version(1))
        a.wake()
        await settle(a)
        assert a.held.holds("trl-policy-v1") and "trl-policy-v1" not in a.replica.adapters
        carrier.clock.advance(60)  # past its backoff
        a.wake()
        await settle(a)
        assert a.held.verdicts == {"trl-policy-v1": "ok"}
        assert "trl-policy-v1" in a.replica.adapters
        assert [(verb, name) for _, verb, name in carrier.calls] == [("load", "trl-policy-v1")]
