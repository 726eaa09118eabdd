"""The served-policy check, fleet-wide: after a version is loaded on a replica (a first load, a
replay into a restarted replica, an in-place replace) its agent asks ``verify`` before the
replica is routed for it, and ``servable`` says what routing may use. Its words are
``verdict.Verdict``'s.

- With the version's reference (``probe.Reference``, the trainer's): the replica's answer must
  be within the tolerance of it, else ``mismatch``. Its agent then loads the version once more
  (unload, then load: a fresh adapter id, so no cached block of the old content is read) and
  asks again; a second mismatch withholds the replica from that version: never routed for it,
  logged once with the gap, counted (``rollout_proxy_policy_mismatch_total{replica}``). When no
  replica holding the version agrees with the reference, training is not stalled: the version is
  served by all of them and the fleet's alarm is raised (``alarm``).
- Without one (plain TRL): the probe's token ids are taken from the first token-id prompt the
  trainer sends (``captured``); each replica's answers for its base model and each version go to
  the comparative ``judge.Judge``, which raises the alarm at the first suspicion and withholds a
  replica only after it repeats (``repeat`` versions). Such a replica has lost its trust: on
  every later version its answer is ``pending`` (not routed) until another replica's answer
  exists to compare it with, and judged then; when no other replica can answer (none routable),
  it is served, the alarm raised already: training never stalls.
- A version loaded before anything could probe it (plain TRL's first version comes before its
  first prompt) is ``unchecked`` and served; it is checked once a probe can be made.
A probe has its own deadline (``timeout_s``); one that fails leaves the version unchecked on
that replica for now (its agent retries), a replica that cannot answer one at all (an HTTP
error) is served unchecked. Nothing here is on the request path: routing reads the maps the
agents publish (``status.ReplicaStatus.publish``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from adapter_receiver.wire import shown
from proxy.adapters.attest.judge import Judge
from proxy.adapters.attest.probe import Captured, ask, default_tolerance, gap
from proxy.adapters.attest.verdict import PROBING, STALE, Verdict
from proxy.adapters.registry import Registry, Version
from proxy.fleet.replica import Replica
from proxy.upstream.client import UpstreamClient
from proxy.upstream.errors import ReplyError, UpstreamError

log = logging.getLogger("proxy.adapters")


class Held(Protocol):
    """What the check reads of one replica's status (``status.Held``)."""

    @property
    def replica_id(self) -> str: ...

    @property
    def routable(self) -> bool: ...

    @property
    def verdicts(self) -> Mapping[str, Verdict]: ...

    def holds(self, name: str) -> bool: ...

    def version(self, name: str) -> Version | None: ...

    def same(self, version: Version) -> bool: ...


@dataclass(frozen=True, slots=True)
class CheckSettings:
    enabled: bool = True
    tolerance: float | None = None  # None: by the replicas' dtype (``probe.default_tolerance``)
    repeat: int = 3
    timeout_s: float = 15.0


class ServedPolicyCheck:
    def __init__(
        self,
        settings: CheckSettings,
        client: UpstreamClient,
        registry: Registry,
        on_probe: Callable[[float], None] = lambda seconds: None,
    ) -> None:
        self.settings = settings
        self._client = client
        self._registry = registry
        self._on_probe = on_probe
        self.captured = Captured()
        self.judge = Judge(settings.repeat)
        self.mismatches: dict[str, int] = {}  # replica id -> versions it was withheld from
        self.last_gap: dict[str, float] = {}  # replica id -> its last answer's gap (reference)

    def alarm(self, held: Iterable[Held]) -> bool:
        """The fleet's alarm (``held``: every replica's record): a suspicion without a
        reference, or a wanted version no replica serves as the trainer computed it."""
        held = list(held)
        return self.judge.alarm or any(nobody_agrees(n, held) for n in self._registry.versions)

    def can_probe(self, version: Version) -> bool:
        if not self.settings.enabled:
            return False
        return version.reference is not None or self.captured.ids is not None

    def tolerance(self, replica: Replica) -> float:
        if self.settings.tolerance is not None:
            return self.settings.tolerance
        config = (replica.server_info or {}).get("vllm_config")
        model = config.get("model_config") if isinstance(config, dict) else None
        dtype = model.get("dtype") if isinstance(model, dict) else None
        return default_tolerance(dtype if isinstance(dtype, str) else None)

    async def verify(
        self, replica: Replica, version: Version, fleet: Iterable[Held]
    ) -> Verdict | None:
        """``replica``'s verdict on ``version``, loaded there (``fleet``: every replica's
        status): see the module docstring."""
        if not self.can_probe(version):
            return Verdict.UNCHECKED
        reference, tolerance = version.reference, self.tolerance(replica)
        probe = (reference.ids, reference.cuts) if reference is not None else self.captured.probe
        assert probe is not None
        try:
            if reference is None and not self.judge.has_base(replica.id):
                base = replica.base_model or ""
                self.judge.base(replica.id, await self._ask(replica, base, probe))
            answer = await self._ask(replica, version.name, probe)
        except ReplyError as exc:
            log.warning("replica %s: %s served unverified (its probe: %s)", replica.id,
                        shown(version.name), exc)  # fmt: skip
            return Verdict.UNVERIFIABLE
        except UpstreamError as exc:
            log.info("replica %s: probe of %s failed (%s): retried", replica.id,
                     shown(version.name), exc)  # fmt: skip
            return None
        if reference is not None:
            self.last_gap[replica.id] = measured = gap(answer, reference.top)
            if measured > tolerance:
                return Verdict.MISMATCH
            log.info("replica %s serves %s as the trainer computed it (a mean gap of %.2g "
                     "nats)", replica.id, shown(version.name), measured)  # fmt: skip
            return Verdict.OK
        for suspect in self.judge.answer(replica.id, version.name, answer, tolerance):
            log.error("replica %s answers %s as it answers its base model or an older version, "
                      "while another replica's answer moved: suspect %d time(s) (withheld from "
                      "%d on)", suspect, shown(version.name), self.judge.suspicions(suspect),
                      self.settings.repeat)  # fmt: skip
        if self.judge.withheld(replica.id, version.name):
            return Verdict.MISMATCH
        if self._waits(replica.id, version.name, fleet):
            log.info("replica %s: %s waits for another replica's answer to be judged (its "
                     "trust was lost)", replica.id, shown(version.name))  # fmt: skip
            return Verdict.PENDING
        return Verdict.OK

    def _waits(self, replica: str, name: str, fleet: Iterable[Held]) -> bool:
        """A distrusted replica's answer for ``name`` has nothing to be compared with yet, and
        another replica can give it."""
        judge = self.judge
        if not judge.distrusted(replica) or judge.compared(replica, name):
            return False
        return any(h.replica_id != replica and h.routable for h in fleet)

    async def _ask(
        self, replica: Replica, model: str, probe: tuple[tuple[int, ...], tuple[int, ...]]
    ) -> tuple[float, ...]:
        started = time.perf_counter()
        answer = await ask(self._client, replica, model, probe, self.settings.timeout_s)
        self._on_probe(time.perf_counter() - started)
        return answer

    def withheld(self, replica: Replica, version: Version) -> None:
        """A second mismatch: ``replica`` is withheld from ``version`` (said once, counted)."""
        self.mismatches[replica.id] = self.mismatches.get(replica.id, 0) + 1
        measured = self.last_gap.get(replica.id)
        said = (
            f"a mean gap of {measured:.3g} nats to the trainer's reference"
            if (measured is not None and version.reference is not None)
            else "comparative evidence"
        )
        log.error("replica %s withheld from %s: it does not serve that version's policy (%s, "
                  "loaded twice)", replica.id, shown(version.name), said)  # fmt: skip

    def forget(self, replica: Replica) -> None:
        """``replica`` restarted (its listing lost what it held): its answers are gone."""
        self.judge.forget(replica.id)

    def checks(self, held: Held, fleet: Iterable[Held]) -> list[Version]:
        """The wanted versions ``held`` holds whose served policy is to be probed: not yet, or
        judged before a probe could be made, or pending and comparable now, or passed before its
        replica's suspicions reached ``repeat`` (then each version it was suspect for is probed
        again, and withheld). ``fleet``: every replica's status."""
        return [
            version
            for name, version in self._registry.versions.items()
            if held.same(version) and self._due(held, version, held.verdicts.get(name), fleet)
        ]

    def _due(
        self, held: Held, version: Version, verdict: Verdict | None, fleet: Iterable[Held]
    ) -> bool:
        if verdict is None:
            return True
        if verdict is Verdict.UNCHECKED:
            return self.can_probe(version)
        if verdict is Verdict.PENDING:
            return not self._waits(held.replica_id, version.name, fleet)
        return verdict is Verdict.OK and self.judge.withheld(held.replica_id, version.name)

    def status(self, held: Mapping[str, Held]) -> dict[str, Any]:
        """What ``/proxy/status`` shows (``held``: each replica's record, by id): each
        replica's wanted versions, their digests (short) and states (``ok``, ``unchecked``,
        ``unverifiable``, ``withheld``, ``probing``, ``stale``: other content held)."""
        replicas: dict[str, dict[str, dict[str, str]]] = {}
        for rid, record in held.items():
            mine = replicas[rid] = {}
            for name, wanted in self._registry.versions.items():
                version = record.version(name)
                if version is not None:
                    state = record.verdicts.get(name, PROBING)
                    state = state if version.same_files(wanted) else STALE
                    mine[name] = {"digest": (version.digest or "")[:12], "state": state}
        return {
            "probe": "on" if self.settings.enabled else "off",
            "probe_ids": len(self.captured.ids or ()),
            "alarm": self.alarm(held.values()),
            "mismatches": dict(self.mismatches),
            "replicas": replicas,
        }

    def servable(
        self,
        name: str,
        version: Version | None,
        verdict: Verdict | None,
        held: Iterable[Held],
    ) -> bool:
        """Whether a replica holding ``name`` (loaded from ``version``, judged ``verdict``) may
        be routed for it; ``held``: every replica's record."""
        wanted = self._registry.wanted(name)
        if wanted is None:
            return True  # not ours to judge (being unloaded, or from before this proxy)
        if version is None or not version.same_files(wanted):
            return False  # other or unknown content under a name now wanted: replaced first
        if verdict is None:
            return not self.can_probe(wanted)  # a probe is due: the replica waits for it
        if verdict is Verdict.WITHHELD:
            return nobody_agrees(name, held)
        return verdict.served


def nobody_agrees(name: str, held: Iterable[Held]) -> bool:
    """Every replica holding the version ``name`` names is withheld from it."""
    verdicts = [h.verdicts.get(name) for h in held if h.holds(name)]
    return bool(verdicts) and all(v is Verdict.WITHHELD for v in verdicts)
