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
own ``sample/dropped_stale_total``).

A trainer of one run of a shared fleet (``--proxy-url http://proxy:8000/runs/<run>``) reads its
run's own figures where the page has them: its rollouts and stale share, its requests in flight
and queued, the advisor's verdict on it (``runs``), not the bare path's or the whole fleet's; the
fleet's figures (replicas, cache, syncs) are the same for every run.
"""

from __future__ import annotations

import json
import logging
import urllib.error
import urllib.request
from typing import Any

from trainer_entry.fleet_run import FleetRun

log = logging.getLogger("trainer_entry")

TIMEOUT_S = 1.0


def figures(status: dict[str, Any], run: str = "") -> dict[str, float | str]:
    """The figures worth a line in the trainer's log, from a ``/proxy/status`` answer; ``run``:
    the run the trainer is (``""``: the bare path, a single-run proxy)."""
    quality = status.get("quality") or {}
    syncs = status.get("syncs") or {}
    replicas = status.get("replicas") or []
    mine = ((status.get("runs") or {}).get(run) or {}) if run else status
    out: dict[str, float | str] = {
        "proxy/replicas_routable": float(sum(1 for r in replicas if r.get("routable"))),
        "proxy/inflight": float(mine.get("inflight", 0)),
        "proxy/queued": float(mine.get("queued", 0)),
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
    rollouts = (status.get("rollouts") or {}).get(run) or {}
    if rollouts.get("stale_share") is not None:
        out["proxy/stale_share"] = float(rollouts["stale_share"])
    if rollouts.get("stale") is not None:
        out["proxy/stale_rollouts"] = float(rollouts["stale"])
    advice = mine.get("advice") or {}
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


def run_of(base_url: str) -> str:
    """The run a base URL names (``http://proxy:8000/runs/<run>``), or ``""`` (the bare path)."""
    try:
        return FleetRun.of(base_url).name
    except ValueError:
        return ""


class ProxyFigures:
    """Reads the figures from the proxy in front of the replicas: the sidecar, or the remote
    proxy behind the local relay (``token``: its bearer token), not the relay's own view."""

    def __init__(self, base_url: str, token: str | None = None) -> None:
        self._url = base_url.rstrip("/") + "/proxy/status"
        self._run = run_of(base_url)
        self._headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._warned = False

    def read(self) -> dict[str, float | str]:
        request = urllib.request.Request(self._url, headers=self._headers)
        try:
            with urllib.request.urlopen(request, timeout=TIMEOUT_S) as answer:
                return figures(json.loads(answer.read()), self._run)
        except (OSError, ValueError, urllib.error.URLError) as exc:
            if not self._warned:  # once: the figures are a courtesy
                log.warning("proxy figures unavailable (%s); training goes on without them", exc)
                self._warned = True
            return {}
