"""The simulated proxy between the trainer and the replicas: its real routing policy, its
per-replica in-flight cap with a FIFO queue, and its pool's membership.

- Each request's body is built as TRL sends it and read by the proxy's own ``peek``; the policy
  gets the proxy's own cost estimates (``routing.cost``) and the replicas' scraped figures
  (``fleet.load.judge``) every ``scrape_s`` unless it is a *blind* variant (request counts only).
- A request goes to a routable replica below the cap, chosen by the policy; with none, or with
  requests already waiting, it waits in the queue (first come, first served) for an answer to
  free a slot or a replica to join.
- Membership, as the proxy's pool (``proxy.fleet.pool``, ``discovery``): ``members`` are the
  replicas in the pool (the policy's hash ring is built over them), ``routable`` those that take
  new requests. ``join`` adds a replica to both and places what waits; ``drain`` takes one out
  of the routable set (nothing new goes there, what runs there finishes) and, once nothing is in
  flight there, removes it from the members and tells ``gone``. A fleet that never changes
  keeps every replica routable from the start.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson

from benchmarks.fleet.engine import Loop, Replica, Request
from benchmarks.fleet.model import ProxyModel
from proxy.config import LoadSettings
from proxy.fleet.load import judge
from proxy.fleet.replica import ReportedLoad
from proxy.routing.cost import CostModel
from proxy.routing.facts import Facts
from proxy.routing.policy import Policy, RouteRequest, Snapshot


@dataclass(eq=False, slots=True)
class Candidate:
    """A replica as the policy sees it."""

    id: str
    inflight: int = 0
    cost: float = 0.0
    reported: ReportedLoad | None = None
    queued: bool = False  # the last scrape showed a queue


@dataclass(slots=True)
class _Sent:
    replica: int
    cost: float
    budget: int


class Router:
    """The proxy between the trainer and the replicas (module docstring)."""

    def __init__(
        self,
        policy: Policy,
        replicas: list[Replica],
        informed: bool,
        proxy: ProxyModel,
        loop: Loop,
        max_tokens: int,
    ) -> None:
        self.policy = policy
        self.replicas = list(replicas)  # every replica that joined, in order (indices stay)
        self.informed = informed
        self.proxy = proxy
        self.loop = loop
        self.max_tokens = max_tokens
        self.candidates = [Candidate(r.id) for r in replicas]
        self.routable = list(self.candidates)  # those that take new requests
        self.members = tuple(r.id for r in replicas)
        self.index = {r.id: i for i, r in enumerate(replicas)}
        self.draining: set[int] = set()
        self.gone: Callable[[Replica], None] = lambda _: None  # a drained replica left
        self.costs = CostModel()
        # An uninformed proxy weighs every request the same (cost 1), as the proxy before costs.
        self.facts = Facts(policy, self.costs if informed else None)
        self.queue: deque[tuple[Request, RouteRequest]] = deque()
        self.load = LoadSettings()
        self._sent: dict[int, _Sent] = {}
        if informed:
            loop.at(proxy.scrape_s, self._scrape)

    def submit(self, request: Request) -> None:
        route = self.route(request)
        if self.queue or not self._place(request, route):
            self.queue.append((request, route))

    def route(self, request: Request) -> RouteRequest:
        """The request's body as TRL sends it, read by the proxy's own path (routing.facts)."""
        body = orjson.dumps(
            {
                "model": request.lora,
                "prompt": request.prompt,
                "max_tokens": self.max_tokens,
                "temperature": 1.0,
                "n": 1,
                "return_token_ids": True,
                "logprobs": 0,
            }
        )
        return self.facts.build(body, b"prompt")

    # -- membership ---------------------------------------------------------------------------

    def join(self, replica: Replica) -> None:
        """``replica`` is routable from now on; what waits in the queue may go there."""
        self.index[replica.id] = len(self.replicas)
        self.replicas.append(replica)
        candidate = Candidate(replica.id)
        self.candidates.append(candidate)
        self.routable.append(candidate)
        self.members = (*self.members, replica.id)
        self._place_queued()

    def drain(self, rid: str) -> None:
        """Nothing new goes to ``rid``; it leaves the pool once its requests are answered."""
        at = self.index[rid]
        self.draining.add(at)
        self.routable.remove(self.candidates[at])
        if not self.candidates[at].inflight:
            self._leave(at)

    def _leave(self, at: int) -> None:
        self.draining.discard(at)
        rid = self.replicas[at].id
        self.members = tuple(m for m in self.members if m != rid)
        self.gone(self.replicas[at])

    # -- requests -----------------------------------------------------------------------------

    def _place(self, request: Request, route: RouteRequest) -> bool:
        cap = self.proxy.per_replica_cap
        free = [c for c in self.routable if c.inflight < cap]
        if not free:
            return False
        decision = self.policy.select(Snapshot(free, self.members), route)
        at = self.index[decision.replica_id]
        candidate = self.candidates[at]
        candidate.inflight += 1
        if self.informed:
            candidate.cost += route.cost
        self._sent[request.uid] = _Sent(at, route.cost, route.decode_budget)
        user_done = request.done
        request.done = lambda r: self._answered(r, user_done)
        self.replicas[at].submit(request)
        return True

    def _answered(self, request: Request, user_done: Any) -> None:
        sent = self._sent.pop(request.uid)
        candidate = self.candidates[sent.replica]
        candidate.inflight -= 1
        if self.informed:
            candidate.cost = candidate.cost - sent.cost if candidate.inflight else 0.0
            self.costs.observe(sent.budget, request.answer)
        if sent.replica in self.draining and not candidate.inflight:
            self._leave(sent.replica)
        request.done = user_done
        user_done(request)
        self._place_queued()

    def _place_queued(self) -> None:
        while self.queue and self._place(*self.queue[0]):
            self.queue.popleft()

    def _scrape(self) -> None:
        for replica, candidate in zip(self.replicas, self.candidates, strict=True):
            figures = ReportedLoad(
                float(len(replica.running)),
                float(replica.queued()),
                replica.kv_usage(),
                float(replica.preemptions),
            )
            candidate.reported, candidate.queued = judge(
                figures, candidate.inflight, candidate.queued, self.load
            )
        self.loop.at(self.loop.now + self.proxy.scrape_s, self._scrape)
