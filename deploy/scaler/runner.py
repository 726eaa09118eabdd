"""The scaler inside the trainer job: built from the job's environment, run in a daemon thread.

``from_environment`` reads what ``deploy up`` gave the trainer job (a fleet that sizes itself
only; without ``$ROLLOUT_SCALER`` there is no scaler, as with plain TRL or a fixed fleet):

- ``$ROLLOUT_SCALER``: the configuration (``deploy.scaler.config``, no secret);
- ``$HF_TOKEN``: the Jobs API's token (the trainer job's own secret), and ``$HF_ENDPOINT``
  where the Jobs API is (huggingface_hub's variable; default the Hub);
- the secrets a replica job is launched with, by the names its spec lists (``$HF_TOKEN``,
  ``$VLLM_API_KEY``): passed to ``run_job`` as secrets, never logged;
- ``$PROXY_ADMIN_KEY``: the proxy's admin key (drain, report);
- ``$HF_NETWORK_GROUP_PREFIX``: set by HF Jobs in every member of the run's network group, to
  find each replica job's address by its alias.
Anything missing is one ``ScalerUnavailable`` line naming it; the trainer then trains on a
fixed fleet and says so.

``Runner`` calls ``Scaler.tick`` every ``poll_s`` until stopped; a pass that raises is logged
(once per distinct message, then again when it changes) and counted, and the next pass goes on:
the thread never dies of a failed call.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Mapping, Sequence

from huggingface_hub import HfApi

from deploy.jobs import HubJobs
from deploy.plan import ADMIN_KEY_SECRET, NETWORK_PREFIX, TOKEN_SECRET
from deploy.scaler.actuator import POLL_S, Scaler, Signals
from deploy.scaler.config import SCALER_ENV, ScalerConfig
from deploy.scaler.proxy_calls import ProxyCalls
from deploy.scaler.state import StateFile

log = logging.getLogger("deploy.scaler")
ENDPOINT_ENV = "HF_ENDPOINT"


class ScalerUnavailable(RuntimeError):
    """The trainer job lacks what the scaler needs; the message names it."""


def resolve_host(name: str) -> Sequence[str]:
    """Every address ``name`` resolves to (the group's DNS inside an HF Jobs network group)."""
    infos = socket.getaddrinfo(name, None, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


def from_environment(
    environ: Mapping[str, str], signals: Signals, proxy_url: str, proxy_token: str | None = None
) -> Scaler | None:
    """The scaler ``environ`` describes (module docstring), talking to the proxy at
    ``proxy_url``; None when the run's fleet is fixed."""
    text = environ.get(SCALER_ENV)
    if not text:
        return None
    try:
        config = ScalerConfig.from_json(text)
    except ValueError as exc:
        raise ScalerUnavailable(str(exc)) from None
    needed = {TOKEN_SECRET, ADMIN_KEY_SECRET, NETWORK_PREFIX, *config.replica.secret_names}
    missing = sorted(name for name in needed if not environ.get(name))
    if missing:
        raise ScalerUnavailable(
            f"the scaler needs ${', $'.join(missing)} in the trainer job (deploy up gives them "
            "with --replica-count MIN..MAX; the network group gives the prefix): the fleet "
            "stays as it is"
        )
    api = HfApi(endpoint=environ.get(ENDPOINT_ENV) or None, token=environ[TOKEN_SECRET])
    return Scaler(
        config,
        HubJobs(api, config.namespace),
        ProxyCalls(proxy_url, environ[ADMIN_KEY_SECRET], proxy_token),
        signals,
        secrets={name: environ[name] for name in config.replica.secret_names},
        resolve=resolve_host,
        prefix=environ[NETWORK_PREFIX],
        clock=time.time,
        store=StateFile(config.state_path),
    )


class Runner:
    """``scaler.tick`` every ``poll_s`` in a daemon thread (module docstring)."""

    def __init__(self, scaler: Scaler, poll_s: float | None = None) -> None:
        self.scaler = scaler
        self.poll_s = poll_s or min(POLL_S, scaler.policy.window_s)
        self.errors = 0
        self._said = ""
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        config = self.scaler.config
        log.info("scaler: on, %s (run %s, namespace %s)", config.scaling.describe(),
                 config.run_name, config.namespace)  # fmt: skip
        self._thread = threading.Thread(target=self.run, name="scaler", daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float = 30.0) -> None:
        """Stop after the pass under way (a launch it began completes and is recorded)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)

    def run(self) -> None:
        while not self._stop.is_set():
            self.once()
            self._stop.wait(self.poll_s)

    def once(self) -> None:
        """One pass that cannot raise (module docstring)."""
        try:
            self.scaler.tick()
        except Exception as exc:
            self.errors += 1
            said = f"{type(exc).__name__}: {exc}"
            if said != self._said:
                log.warning("scaler: a pass failed (%s); the next pass tries again in %.0f s",
                            said, self.poll_s)  # fmt: skip
            self._said = said
        else:
            if self._said:
                log.info("scaler: passes succeed again")
            self._said = ""
