"""What a rehearsal's proxy said of its replicas while the run trained: ``/proxy/status`` read
from this machine every ``EVERY_S`` (the sidecar answers on the trainer job's address in the
group, without a key: the plan gives it none) until told to stop, each answer kept whole with
when it came (``Watch``). Then pure questions of those answers (``Replica``): was a replica
listed, routed, sent prompts, given which adapter versions, drained, gone.

The proxy's own status is the evidence a scaling rehearsal asserts on, beside the bridge's job
list and the logs: not the scaler's account of what it did.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from deploy.health import get
from replica_entry.sim.latency import version_of

EVERY_S = 0.5
TIMEOUT_S = 2.0


@dataclass(frozen=True)
class Answer:
    at: float  # time.monotonic() when it came
    status: dict[str, Any]

    def replica(self, host: str) -> dict[str, Any] | None:
        """The entry of the replica at ``host`` (an address in the group), if listed."""
        for entry in self.status.get("replicas") or []:
            if f"//{host}:" in str(entry.get("url", "")):
                return dict(entry)
        return None

    @property
    def newest(self) -> int | None:
        """The newest adapter version the proxy wants on its fleet (its number)."""
        newest = (self.status.get("adapters") or {}).get("newest")
        return newest if isinstance(newest, int) else None


@dataclass
class Watch:
    """Reads ``url()``'s ``/proxy/status`` in a thread (None: not known yet, asked again)."""

    url: Callable[[], str | None]
    answers: list[Answer] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="fleet-watch", daemon=True)
        self._thread.start()

    def stop(self) -> list[Answer]:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(TIMEOUT_S + EVERY_S + 5)
        return self.answers

    def _run(self) -> None:
        while not self._stop.wait(EVERY_S):
            base = self.url()
            if base is None:
                continue
            probe = get(f"{base}/proxy/status", "", TIMEOUT_S)
            if probe.ok and isinstance(probe.body, dict):
                self.answers.append(Answer(time.monotonic(), probe.body))


@dataclass(frozen=True)
class Replica:
    """One replica (by its address) through a run's answers."""

    host: str
    answers: Sequence[Answer]

    @property
    def listed(self) -> list[tuple[Answer, dict[str, Any]]]:
        return [(a, entry) for a in self.answers if (entry := a.replica(self.host)) is not None]

    @property
    def routed(self) -> list[tuple[Answer, dict[str, Any]]]:
        return [(a, e) for a, e in self.listed if e.get("routable") and not e.get("draining")]

    @property
    def prompt_tokens(self) -> float:
        """The most prompt tokens the proxy said it had sent it."""
        return max((_tokens(e) for _, e in self.listed), default=0.0)

    @property
    def held_newest(self) -> list[int]:
        """Each newest version the proxy wanted that it listed the replica holding, routed."""
        return sorted(
            {
                a.newest
                for a, e in self.routed
                if a.newest is not None
                and a.newest in {version_of(n) for n in e.get("adapters", ())}
            }
        )

    @property
    def drained(self) -> list[tuple[Answer, dict[str, Any]]]:
        """Every listing from the first that shows it draining on."""
        listed = self.listed
        first = next((i for i, (_, e) in enumerate(listed) if e.get("draining")), len(listed))
        return listed[first:]

    def routed_after_drain(self) -> list[str]:
        """What the proxy said of it after its drain began that means it still routed there:
        routable again, or more prompt tokens sent (one line each)."""
        drained = self.drained
        if not drained:
            return []
        sent = _tokens(drained[0][1])
        said = []
        for answer, entry in drained:
            if entry.get("routable") or not entry.get("draining"):
                said.append(f"routable again at v{answer.newest}: {entry}")
            if _tokens(entry) > sent:
                said.append(
                    f"sent {_tokens(entry) - sent:.0f} more prompt tokens by v{answer.newest}"
                )
        return said

    @property
    def last(self) -> dict[str, Any] | None:
        """Its entry in the last answer (None: no longer listed then)."""
        return self.answers[-1].replica(self.host) if self.answers else None

    def describe(self) -> str:
        """One line for a failed assertion: what the proxy said of it, first and last."""
        listed = self.listed
        if not listed:
            return f"{self.host}: never listed in {len(self.answers)} answer(s)"
        keys = ("state", "routable", "draining", "inflight", "prompt_tokens", "adapters")
        (first_at, first), (last_at, last) = listed[0], listed[-1]
        return (
            f"{self.host}: listed in {len(listed)} of {len(self.answers)} answer(s); at "
            f"v{first_at.newest} { {k: first.get(k) for k in keys} }; at v{last_at.newest} "
            f"{ {k: last.get(k) for k in keys} }; in the last answer (v{self.answers[-1].newest}): "
            f"{'yes' if self.last is not None else 'no'}"
        )


def _tokens(entry: dict[str, Any]) -> float:
    return float(entry.get("prompt_tokens") or 0)
