"""The replicas' agents (``agent.Agent``) and their statuses: one of each per replica of the
pool, made when first needed, made anew when a replica of that id is added anew, cancelled once
its replica left the pool; the one owner of that map. Every change of the pool tells each agent
(``Agent.left``: a replica that left routing gives up the command under way there)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator, Mapping

from proxy.adapters.agent import Agent, Tools
from proxy.adapters.status import Copy, ReplicaStatus
from proxy.fleet.pool import ReplicaPool
from proxy.fleet.replica import Replica


class Agents:
    def __init__(self, tools: Tools, copies: Callable[[str], Mapping[str, Copy]]) -> None:
        """``copies``: what a previous process knew the replica of that id to hold pushed."""
        self._tools = tools
        self._copies = copies
        self._by_id: dict[str, tuple[Agent, asyncio.Task[None]]] = {}
        tools.pool.follow(self._pool_changed)

    def __iter__(self) -> Iterator[Agent]:
        return iter([agent for agent, _ in self._by_id.values()])

    def of(self, replica: Replica) -> Agent:
        found = self._by_id.get(replica.id)
        if found is not None and found[0].replica is replica:
            return found[0]
        if found is not None:
            found[1].cancel()  # a replica of that id added anew: a new agent for it
        status = self._tools.statuses.new(replica)
        status.remember(self._copies(replica.id))
        agent = Agent(replica, status, self._tools)
        self._by_id[replica.id] = (agent, asyncio.create_task(agent.run(), name="agent"))
        return agent

    def status_of(self, replica: Replica) -> ReplicaStatus:
        return self.of(replica).status

    def wake_all(self) -> None:
        """Every agent looks again, its routing recomputed now (not after a long load ends)."""
        self._forget_gone()
        for replica in self._tools.pool:
            agent = self.of(replica)
            agent.publish()
            agent.wake()

    def republish(self) -> None:
        """Each agent's routing recomputed (another replica's verdict may change what it may
        serve), and the agents with a probe due woken (another's answer may make one due)."""
        self._forget_gone()
        for agent in self:
            agent.publish()
            if agent.checks_due() and agent.idle.is_set():
                agent.wake()

    async def settled(self) -> None:
        """Until every agent has carried out what it can (the unloads answered so far)."""
        while busy := [agent for agent in self if not agent.idle.is_set()]:
            await asyncio.gather(*(agent.idle.wait() for agent in busy))

    async def close(self, drain_s: float) -> None:
        """Each agent's last round (what it owes) gets ``drain_s``; then they are cancelled."""
        for agent in self:
            agent.wake()
        idle = [asyncio.ensure_future(agent.idle.wait()) for agent in self]
        if idle:
            await asyncio.wait(idle, timeout=drain_s)
        tasks = [*idle, *(task for _, task in self._by_id.values())]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def _forget_gone(self) -> None:
        pool = self._tools.pool
        for rid in [rid for rid in self._by_id if pool.get(rid) is None]:
            self._by_id.pop(rid)[1].cancel()
            self._tools.statuses.remove(rid)

    def _pool_changed(self, pool: ReplicaPool) -> None:
        for agent in self:
            agent.left()
