"""TRL's ``/pause`` and ``/resume``, answered; ``/reset_prefix_cache`` fanned out to every replica.

**The pause is answered, not forwarded** (unless ``--forward-pause``). Every sync that reaches
the proxy is a LoRA sync: the merged-weight sync needs NCCL endpoints (``/init_weight_transfer_
engine``, ``/update_weights``) the proxy does not serve, so TRL falls back to it only against a
bare vLLM. A LoRA sync changes no weight a running request uses. TRL 1.16's
``AsyncGRPOTrainer._sync_weight_lora`` (``trl/experimental/async_grpo/async_grpo_trainer.py``)
pauses, saves ``trl-policy-vN`` under a name never used before, loads it
(``vllm_client.load_lora_adapter``, answered only once every replica has it), resumes, and only
then bumps ``model_version``: "The adapter has to exist on the server BEFORE the version moves
below: the rollout worker derives the adapter it requests from ``model_version``". The rollout
worker names the version in every request (``AsyncRolloutWorker._request_model``:
``f"{self.lora_name}-v{self.model_version}"``, read per turn from the shared ``mp.Value``), and
each group keeps the version it started with (``RolloutGroup.model_version``) for TRL's
staleness check. So a request running through the sync runs on the version it named, which
stays loaded (the unload of ``v(N - max_staleness - 1)`` comes after the resume and names a
version TRL's staleness check drops once ``model_version`` moves to N a moment later), and
no request can name vN before the load that serves it answered: freezing the fleet protects
nothing, it only stops generation for the length of the sync. This holds for TRL's own
clients; a client that pauses to change weights by another route (an injected
``weight_transfer``) needs ``--forward-pause``, which sends both to every replica as before (a
replica that joins meanwhile gets the pause replayed). The trainer's relay answers them too (one
round trip less per sync; the proxy in front of the fleet then sees no window); forwarded to a
proxy, a window counts as frozen only when a replica froze (a proxy answers ``"fleet":
"generating"``).

Fanned out, every replica must answer 200; the edge turns the outcomes into one aggregated answer
(``proxy.http.responses.Redactor.control_answer``). A replica that cannot be reached is ejected
instead of failing the call (TRL aborts training on a non-200 from pause or resume) and gets the
fleet's state when it is readmitted. State changes are applied one at a time, in arrival order.
Adapter loads and unloads have their own service (``proxy.adapters``).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

import orjson

from proxy.fleet.pool import ReplicaPool
from proxy.fleet.replica import Replica
from proxy.fleet.sync import FleetSync
from proxy.metrics.recorder import Metrics
from proxy.upstream.client import Reply, UpstreamClient
from proxy.upstream.errors import Blame, UpstreamError, blame

ANSWERED = ("/pause", "/resume")  # what the proxy answers itself unless --forward-pause
PAUSE_MODES = ("abort", "wait", "keep")  # vLLM's (its default: abort)


@dataclass(frozen=True, slots=True)
class ControlOutcome:
    replica: Replica
    reply: Reply | None  # None: unreachable (ejected)
    error: str = ""

    @property
    def status(self) -> int | None:
        return self.reply.status if self.reply is not None else None


class FanOut:
    def __init__(
        self,
        pool: ReplicaPool,
        client: UpstreamClient,
        fleet: FleetSync,
        metrics: Metrics,
    ) -> None:
        self._pool = pool
        self._client = client
        self._fleet = fleet
        self._metrics = metrics

    async def send(
        self, targets: tuple[Replica, ...], path_qs: str, body: bytes | None
    ) -> list[ControlOutcome]:
        return list(await asyncio.gather(*(self._one(r, path_qs, body) for r in targets)))

    async def _one(self, replica: Replica, path_qs: str, body: bytes | None) -> ControlOutcome:
        try:
            reply = await self._client.call(replica, "POST", path_qs, body=body)
        except UpstreamError as exc:
            if blame(exc) is Blame.OURS:  # our own limit, not the replica's fault: no ejection
                return ControlOutcome(
                    replica, None, f"not sent: the proxy ran out of resources ({exc})"
                )
            error = f"unreachable ({type(exc).__name__}) during {path_qs.split('?')[0]}"
            self._pool.eject(replica, "fanout", error)
            return ControlOutcome(replica, None, f"{error}; ejected until it recovers")
        return ControlOutcome(replica, reply)

    def answers(self, path: str) -> bool:
        """The proxy answers ``path`` itself, from its own state (TRL's pause and resume)."""
        return not self._fleet.forward_pause and path in ANSWERED

    def answer(self, path: str, query: str) -> None:
        """TRL's ``/pause`` or ``/resume``, answered: the sync window is kept, the fleet goes on."""
        window = self._fleet.control_applied(path, query, frozen=False)
        if window is not None:
            self._metrics.record_sync_window(window, frozen=False)

    async def control(self, path: str, query: str) -> list[ControlOutcome]:
        """``/pause``, ``/resume`` or ``/reset_prefix_cache`` on every routable replica.

        Waits out a blip (TRL does not retry these), then raises ``NoReplica`` when none is
        routable."""
        path_qs = path + (f"?{query}" if query else "")
        await self._pool.wait_routable()  # outside the lock: an admission takes it
        async with self._fleet.changes:  # one at a time, in order; never beside an admission
            targets = self._pool.require_routable()
            started = time.perf_counter()
            outcomes = await self.send(targets, path_qs, None)
            self._metrics.record_control(path.lstrip("/"), time.perf_counter() - started)
            # A proxy upstream (the trainer's relay forwards to one) answers without freezing.
            frozen = not all(_generating(o.reply) for o in outcomes)
            window = self._fleet.control_applied(path, query, frozen=frozen)
            if window is not None:
                self._metrics.record_sync_window(window, frozen=frozen)
            return outcomes


def _generating(reply: Reply | None) -> bool:
    """A proxy's own answer to a pause or resume: its fleet kept generating."""
    if reply is None or reply.status != 200:
        return False
    try:
        answer = orjson.loads(reply.body)
    except orjson.JSONDecodeError:
        return False
    return isinstance(answer, dict) and answer.get("fleet") == "generating"
