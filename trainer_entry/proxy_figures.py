"""The proxy's key figures, added to what TRL logs at each logging step.

Many runs on HF Jobs have no Prometheus: their user watches the trainer's log and its tracker
(``--report-to``). So at each logging step the trainer asks the proxy (``/proxy/status``, one
GET with a short timeout, its failures ignored: figures are a courtesy, never a reason to stop
training) and adds, under ``proxy/``: the prefix-cache hit ratio, the reuse that was available
and affinity efficiency, the last weight sync's window (pause to resume; ``proxy/sync_window_s``,
called ``proxy/sync_paused_s`` before the fleet kept generating through it) and the share of the
run the fleet stood frozen,
the replicas routable, the advisor's verdict, and the waste the proxy sees: the share of the
rollout tokens answered after their version left the window (``proxy/stale_share``, beside TRL's
own ``sample/dropped_stale_total``), the bare path's.
"""

from __future__ import annotations

import json
import logging
import urllib.error
import urllib.request
from typing import Any

log = logging.getLogger("trainer_entry")

TIMEOUT_S = 1.0


def figures(status: dict[str, Any]) -> dict[str, float | str]:
    """The figures worth a line in the trainer's log, from a ``/proxy/status`` answer."""
    quality = status.get("quality") or {}
    syncs = status.get("syncs") or {}
    replicas = status.get("replicas") or []
    out: dict[str, float | str] = {
        "proxy/replicas_routable": float(sum(1 for r in replicas if r.get("routable"))),
        "proxy/inflight": float(status.get("inflight", 0)),
        "proxy/queued": float(status.get("queued", 0)),
    }
    for key, name in (
        ("hit_ratio", "proxy/cache_hit_ratio"),
        ("available", "proxy/reuse_available"),
        ("efficiency", "proxy/affinity_efficiency"),
    ):
        if quality.get(key) is not None:
            out[name] = float(quality[key])
    for key, name in (("last_s", "proxy/sync_window_s"), ("paused_share", "proxy/paused_share")):
        if syncs.get(key) is not None:
            out[name] = float(syncs[key])
    bare = (status.get("rollouts") or {}).get("") or {}
    if bare.get("stale_share") is not None:
        out["proxy/stale_share"] = float(bare["stale_share"])
    if bare.get("stale") is not None:
        out["proxy/stale_rollouts"] = float(bare["stale"])
    advice = status.get("advice") or {}
    if advice.get("verdict"):
        out["proxy/advice"] = str(advice["verdict"])
    return out


def replicas_reported(base_url: str, token: str | None = None) -> int | None:
    """How many replicas the proxy at ``base_url`` knows (``/proxy/status``); None if it
    cannot say (its figures sizing the in-flight default then fall back to the window)."""
    request = urllib.request.Request(
        base_url.rstrip("/") + "/proxy/status",
        headers={"Authorization": f"Bearer {token}"} if token else {},
    )
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_S * 5) as answer:
            replicas = json.loads(answer.read()).get("replicas")
    except (OSError, ValueError, AttributeError):
        return None
    return len(replicas) if isinstance(replicas, list) and replicas else None


class ProxyFigures:
    """Reads the figures from the proxy in front of the replicas: the sidecar, or the remote
    proxy behind the local relay (``token``: its bearer token), not the relay's own view."""

    def __init__(self, base_url: str, token: str | None = None) -> None:
        self._url = base_url.rstrip("/") + "/proxy/status"
        self._headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._warned = False

    def read(self) -> dict[str, float | str]:
        request = urllib.request.Request(self._url, headers=self._headers)
        try:
            with urllib.request.urlopen(request, timeout=TIMEOUT_S) as answer:
                return figures(json.loads(answer.read()))
        except (OSError, ValueError, urllib.error.URLError) as exc:
            if not self._warned:  # once: the figures are a courtesy
                log.warning("proxy figures unavailable (%s); training goes on without them", exc)
                self._warned = True
            return {}
