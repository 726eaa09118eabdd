"""A fleet that changes during a run: replicas launched and retired while TRL trains.

The rules and what they cost:
- **Launch** at t: the replica is *starting* (its GPU is held from t: the image pulls, vLLM
  loads the model) and joins the proxy's pool, routable, at t + ``startup_s``.
- **Retire**: the replica is *draining* (``Router.drain``): no new request is routed to it,
  what runs there finishes (a conversation's next turn goes elsewhere); once nothing is in
  flight there it is *gone*, and its cost stops then. Which one: the one whose loss costs the
  least cached prefix, the fewest KV blocks holding prompt prefixes (in use or cached), then
  the fewest requests in flight (it drains first), then the newest.
- The replicas a run starts with are ready at 0 (start-ups before the run are nobody's); the
  run ends at the trainer's last step, and every replica's cost stops then.
- A replica that joins while the fleet is paused for a frozen sync joins paused.
- GPU-seconds: each replica's time held (launch to gone) x ``replica_gpus``, and the run's wall
  time x ``trainer_gpus`` (the trainer holds its GPUs for the whole run, waiting or not).

``ElasticTrainer`` is ``sim.Trainer`` recording what the scaler reads: when each step ended
and how long it waited for samples (idle, fewer than a step's groups ready). Its figures
(``FleetRun``) cover every replica that joined, the whole run. Cost: O(replicas) per change.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from benchmarks.fleet.engine import Loop, Replica
from benchmarks.fleet.model import GpuModel
from benchmarks.fleet.router import Router
from benchmarks.fleet.sim import Trainer


@dataclass(eq=False, slots=True)
class Member:
    """One replica's life in the fleet (times in simulated seconds)."""

    replica: Replica
    launched_at: float
    ready_at: float | None = None
    draining_at: float | None = None
    gone_at: float | None = None

    @property
    def state(self) -> str:
        if self.gone_at is not None:
            return "gone"
        if self.draining_at is not None:
            return "draining"
        return "starting" if self.ready_at is None else "ready"

    def held_s(self, now: float) -> float:
        """How long its GPU has been held by ``now``."""
        end = self.gone_at if self.gone_at is not None else now
        return max(end - self.launched_at, 0.0)


class ElasticFleet:
    """The replicas' lives: launched, ready, draining, gone (module docstring)."""

    def __init__(self, gpu: GpuModel, loop: Loop, startup_s: float) -> None:
        self.gpu = gpu
        self.loop = loop
        self.startup_s = startup_s
        self.members: list[Member] = []
        self.live: list[Replica] = []  # in the pool (ready or draining): what a sync pauses
        self.started: list[float] = []  # each launch's measured start-up, in order
        self.timeline: list[tuple[float, int, int, int]] = []  # (t, ready, starting, draining)
        self.router: Router | None = None

    def initial(self, replicas: int) -> list[Replica]:
        """The replicas the run starts with, ready at 0."""
        for _ in range(replicas):
            member = self._new()
            member.ready_at = 0.0
            self.live.append(member.replica)
        self._note()
        return list(self.live)

    def attach(self, router: Router) -> None:
        self.router = router
        router.gone = self._gone

    def _new(self) -> Member:
        i = len(self.members)
        replica = Replica(f"10.0.{i // 250}.{i % 250 + 1}:8000", self.gpu, self.loop)
        member = Member(replica, self.loop.now)
        self.members.append(member)
        return member

    # -- changes ------------------------------------------------------------------------------

    def launch(self) -> None:
        member = self._new()
        self.loop.at(self.loop.now + self.startup_s, self._ready, member)
        self._note()

    def _ready(self, member: Member) -> None:
        assert self.router is not None
        member.ready_at = self.loop.now
        self.started.append(member.ready_at - member.launched_at)
        if self.live and self.live[0].paused:
            member.replica.pause()
        self.live.append(member.replica)
        self.router.join(member.replica)
        self._note()

    def retire(self, count: int) -> None:
        """Drain ``count`` ready replicas (never the last one), cheapest to lose first."""
        assert self.router is not None
        for _ in range(count):
            ready = [m for m in self.members if m.state == "ready"]
            if len(ready) <= 1:
                return
            member = min(ready, key=self._loss)
            member.draining_at = self.loop.now
            self._note()
            self.router.drain(member.replica.id)

    def _loss(self, member: Member) -> tuple[int, int, int]:
        """What retiring it costs: cached prefix blocks, requests to drain, then the oldest."""
        replica = member.replica
        return (
            len(replica.used) + len(replica.free),
            len(replica.running) + len(replica.waiting),
            -self.members.index(member),
        )

    def _gone(self, replica: Replica) -> None:
        member = next(m for m in self.members if m.replica is replica)
        member.gone_at = self.loop.now
        self.live.remove(replica)
        self._note()

    # -- figures ------------------------------------------------------------------------------

    def counts(self) -> tuple[int, int, int]:
        """(ready, starting, draining) now."""
        states = [m.state for m in self.members]
        return states.count("ready"), states.count("starting"), states.count("draining")

    def _note(self) -> None:
        self.timeline.append((self.loop.now, *self.counts()))

    def held_s(self, now: float) -> float:
        """Replica-seconds held by ``now``."""
        return sum(m.held_s(now) for m in self.members)


class ElasticTrainer(Trainer):
    """``sim.Trainer`` recording each step's end and its time waiting for samples."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.ends: list[float] = []  # when each step ended
        self.waited_s = 0.0  # idle with fewer than a step's groups ready, until the last wait
        self._idle_since: float | None = 0.0

    def waited(self, now: float) -> float:
        """Seconds spent waiting for samples by ``now``."""
        since = self._idle_since
        return self.waited_s + (now - since if since is not None else 0.0)

    def _try_train(self) -> None:
        # Called at every change to idle (a step or a sync ended) and at every finished group.
        if self.state == "idle" and self._idle_since is None:
            self._idle_since = self.loop.now
        super()._try_train()
        if self.state == "training" and self._idle_since is not None:
            self.waited_s += self.loop.now - self._idle_since
            self._idle_since = None

    def _trained(self) -> None:
        self.ends.append(self.loop.now)
        super()._trained()

    def _counted(self) -> list[Replica]:
        """Every replica that joined (the live list loses those gone)."""
        return self.router.replicas


@dataclass(slots=True)
class ElasticRun:
    """What one run with a changing fleet measured, over the whole run."""

    wall_s: float
    steps: int
    step_ends: list[float]
    replica_s: float  # replica-seconds held
    waited_s: float
    generated_tokens: int
    wasted_tokens: int
    hit_rate: float
    timeline: list[tuple[float, int, int, int]]
    decisions: list[dict[str, Any]] = field(default_factory=list)
