"""A run on a shared fleet (``deploy up --fleet``): declared on the fleet's proxy before TRL's
first request, removed when the run ends.

The trainer is pointed at ``http://proxy:8000/runs/<run>`` (``--proxy-url``), and the fleet's
proxy serves only the runs it knows (404 for others), so node 0 declares its run with the
proxy's admin API, ``POST /admin/runs {"name": RUN, "weight": W}`` (201 new; 200 already
there: a job HF Jobs runs again declares again), with the fleet's admin key
(``--fleet-key-env``), and removes it, ``DELETE /admin/runs/RUN`` (the proxy unloads its
adapters from every replica), when training ends, fails or is stopped (a job's cancel is a
SIGTERM, which ``trainer_entry.launch`` passes to the ranks and waits out), so the run's share
of ``max_loras`` and of the proxy's slots goes back to the others.

The fleet's proxy may be restarting: the declaration is retried every ``RETRY_S`` for up to
``DECLARE_WAIT_S`` while the proxy cannot be reached or answers 5xx; any 4xx is final and said
in one line (401: the key is not the fleet's).
"""

from __future__ import annotations

import json
import logging
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

log = logging.getLogger("trainer_entry")

DECLARE_WAIT_S = 300.0
RETRY_S = 2.0
REQUEST_TIMEOUT_S = 30.0
RUN_PATH = "/runs/"


class FleetRefused(Exception):
    """The fleet's proxy would not take the run (the message says why and what to do)."""


@dataclass(frozen=True)
class FleetRun:
    """Run ``name`` of the proxy at ``origin`` (scheme and host of ``--proxy-url``)."""

    origin: str
    name: str

    @classmethod
    def of(cls, proxy_url: str) -> FleetRun:
        """``http://host:8000/runs/NAME`` -> (``http://host:8000``, ``NAME``); ValueError if
        the URL does not name a run."""
        parts = urllib.parse.urlsplit(proxy_url)
        path = parts.path.rstrip("/")
        name = path.removeprefix(RUN_PATH)
        if not path.startswith(RUN_PATH) or not name or "/" in name:
            raise ValueError(f"{proxy_url!r} does not end in /runs/<run>: name the run's path")
        return cls(urllib.parse.urlunsplit((parts.scheme, parts.netloc, "", "", "")), name)


def _send(request: urllib.request.Request) -> int:
    try:
        with urllib.request.urlopen(request, timeout=REQUEST_TIMEOUT_S) as response:
            return int(response.status)
    except urllib.error.HTTPError as error:
        return int(error.code)


def _request(url: str, method: str, key: str, body: object | None = None) -> urllib.request.Request:
    data = json.dumps(body).encode() if body is not None else None
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
    return urllib.request.Request(url, data=data, headers=headers, method=method)


def declare(
    run: FleetRun,
    key: str,
    weight: float,
    *,
    wait_s: float = DECLARE_WAIT_S,
    retry_s: float = RETRY_S,
) -> None:
    """Declare ``run`` on its fleet's proxy; raises ``FleetRefused``."""
    url = f"{run.origin}/admin/runs"
    deadline = time.monotonic() + wait_s
    while True:
        try:
            status = _send(_request(url, "POST", key, {"name": run.name, "weight": weight}))
        except OSError as exc:  # urllib.error.URLError is one
            status, why = 0, f"unreachable ({exc})"
        else:
            why = f"HTTP {status}"
        if status in (200, 201):
            log.info("run %s declared on the fleet's proxy %s (weight %g)", run.name,
                     run.origin, weight)  # fmt: skip
            return
        if status == 401:
            raise FleetRefused(
                f"the fleet's proxy {run.origin} refused the fleet key: it is derived from the "
                "HF token that started the fleet; join with that token (`deploy up --fleet`)"
            )
        if 400 <= status < 500:
            raise FleetRefused(
                f"the fleet's proxy {run.origin} would not declare run {run.name} ({why}): see "
                "its log; a fleet serves at most 32 runs"
            )
        if time.monotonic() + retry_s > deadline:
            raise FleetRefused(
                f"the fleet's proxy {run.origin} was not reachable for {wait_s:g} s ({why}): "
                "check that the fleet is up (`deploy fleet status`)"
            )
        log.info("the fleet's proxy %s: %s; retrying in %g s", run.origin, why, retry_s)
        time.sleep(retry_s)


def remove(run: FleetRun, key: str) -> None:
    """Remove ``run`` from its fleet's proxy (best effort: logged, never raised)."""
    try:
        status = _send(_request(f"{run.origin}/admin/runs/{run.name}", "DELETE", key))
    except OSError as exc:
        log.warning("could not remove run %s from the fleet's proxy: %s", run.name, exc)
        return
    if status in (200, 404):
        log.info("run %s removed from the fleet's proxy (its adapters are unloaded)", run.name)
    else:
        log.warning("the fleet's proxy answered HTTP %d removing run %s", status, run.name)


@contextmanager
def declared(
    proxy_url: str, key: str, weight: float, wait_s: float = DECLARE_WAIT_S
) -> Iterator[None]:
    """The run declared on the fleet's proxy while the block runs, removed after."""
    run = FleetRun.of(proxy_url)
    declare(run, key, weight, wait_s=wait_s)
    try:
        yield
    finally:
        remove(run, key)
