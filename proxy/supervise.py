"""Keeping the proxy up: ``rollout-proxy --supervise`` runs it as a child and restarts it.

The proxy is the run's single point of failure, so a proxy that dies (a crash, an OOM kill, a
SIGKILL) is started again on the same port; it rebuilds its view from the replicas (probes,
their models and adapters, the adapter source). Rules:
- a child that exits 0 (a clean shutdown) or 2 (a bad setting, a port it cannot open: restarting
  cannot help) ends the supervisor with the same code; any other end is a crash and is restarted;
- restarts back off: ``RestartDelay.first_s`` after a child that ran at least ``healthy_s``,
  doubling up to ``max_s`` while children keep dying young (a crash loop);
- SIGTERM/SIGINT go to the child, and the supervisor ends when the child has; the child is
  SIGKILLed by the kernel if the supervisor dies first (``proxy.lifeline``);
- every restart is logged and counted: the child exports the count as
  ``rollout_proxy_restarts_total`` (from ``RESTARTS_ENV``) and ``/proxy/status`` shows it;
- the supervisor opens the listening socket once and hands it down to each child (its descriptor
  in ``LISTEN_FD_ENV``), as gunicorn and uvicorn's reloader do: while no child runs, clients'
  connections wait in the kernel's accept queue instead of being refused, and the next child
  accepts them once its app is up (a request in flight when a child dies is reset all the same).
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import FrameType

from proxy.clock import Backoff
from proxy.lifeline import preexec

log = logging.getLogger("proxy.supervise")

RESTARTS_ENV = "ROLLOUT_PROXY_RESTARTS"  # how many times the supervisor restarted the proxy
FINAL_CODES = (0, 2)  # clean shutdown, bad setting or port: not restarted
LISTEN_FD_ENV = "ROLLOUT_PROXY_LISTEN_FD"  # the listening socket the supervisor handed down


def inherited_socket() -> socket.socket | None:
    """The listening socket this process's supervisor handed down, if any."""
    value = os.environ.get(LISTEN_FD_ENV, "")
    return socket.socket(fileno=int(value)) if value.isdigit() else None


def restarts_so_far() -> int:
    """How many times this process's supervisor restarted the proxy (0 unsupervised)."""
    value = os.environ.get(RESTARTS_ENV, "0")
    return int(value) if value.isdigit() else 0


@dataclass(slots=True)
class RestartDelay:
    """Delay before the next restart, from how long the last child lived: ``proxy.clock``'s one
    ``Backoff`` (doubling from ``first_s`` to ``max_s``) over the children in a row that died
    young (a child that lived ``healthy_s`` starts it over). Pure."""

    first_s: float = 0.5
    max_s: float = 30.0
    healthy_s: float = 60.0
    _young: int = -1  # children in a row that died young (-1: none started yet)

    def delay(self, uptime_s: float) -> float:
        self._young = 0 if uptime_s >= self.healthy_s or self._young < 0 else self._young + 1
        return Backoff(self.first_s, self.max_s).delay(self._young)


def child_argv(argv: Sequence[str]) -> list[str]:
    """The proxy's own command line: ``argv`` without supervision (flags beat env and file)."""
    kept = [a for a in argv if a not in ("--supervise", "--no-supervise")]
    return [sys.executable, "-m", "proxy", *kept, "--no-supervise"]


def supervise(
    argv: Sequence[str],
    listener: socket.socket,
    *,
    backoff: RestartDelay | None = None,
    spawn: Callable[[list[str], dict[str, str]], subprocess.Popen[bytes]] | None = None,
) -> int:
    """Run the proxy with ``argv`` on ``listener`` until it ends cleanly or is told to stop;
    returns its code."""
    backoff = backoff or RestartDelay()
    fd = listener.fileno()
    # The child dies with the supervisor: a SIGKILLed supervisor leaves no proxy on its port.
    spawn = spawn or (
        lambda cmd, env: subprocess.Popen(cmd, env=env, preexec_fn=preexec(), pass_fds=(fd,))
    )
    stop = threading.Event()
    child: subprocess.Popen[bytes] | None = None

    def forward(signum: int, frame: FrameType | None) -> None:
        stop.set()
        if child is not None and child.poll() is None:
            child.send_signal(signum)

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, forward)
    restarts = 0
    while True:
        env = {**os.environ, RESTARTS_ENV: str(restarts), LISTEN_FD_ENV: str(fd)}
        started = time.monotonic()
        child = spawn(child_argv(argv), env)
        code = child.wait()
        if stop.is_set() or code in FINAL_CODES:
            return code
        uptime = time.monotonic() - started
        delay = backoff.delay(uptime)
        restarts += 1
        log.error(
            "the proxy (pid %d) died after %.1f s with %s; restart %d in %.1f s",
            child.pid,
            uptime,
            f"signal {-code}" if code < 0 else f"exit code {code}",
            restarts,
            delay,
        )
        if stop.wait(delay):
            return code
