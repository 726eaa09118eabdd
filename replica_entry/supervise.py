"""Run a server as a child process: forward signals, announce readiness, pass on its exit code.

The child stays in our process group, so a supervisor that kills the group (a test harness, a
job runtime) takes it down with us. SIGTERM and SIGINT received here are forwarded to the child
and we keep waiting for it: the child decides how to shut down, and its exit code becomes ours
(``128 + N`` when it died of signal N, as a shell reports it). Readiness is the child's
``/health`` answering 200; then ``ready_line`` goes to stdout once. A child that is not ready
within ``ready_timeout_s`` is terminated (then killed after a grace period) and we exit 1.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from types import FrameType

POLL_INTERVAL_S = 0.5
KILL_GRACE_S = 30.0


def supervise(
    argv: Sequence[str],
    env: Mapping[str, str],
    *,
    health_url: str,
    ready_line: str,
    ready_timeout_s: float,
) -> int:
    """Start ``argv`` and wait for it; see the module docstring for the protocol."""
    child = subprocess.Popen(list(argv), env=dict(env))
    stopping = False

    def forward(signum: int, _frame: FrameType | None) -> None:
        nonlocal stopping
        stopping = True
        if child.poll() is None:
            child.send_signal(signum)

    previous = {s: signal.signal(s, forward) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        deadline = time.monotonic() + ready_timeout_s
        while child.poll() is None and not stopping:
            if _healthy(health_url):
                print(ready_line, flush=True)
                break
            if time.monotonic() > deadline:
                print(f"not ready after {ready_timeout_s:g} s: stopping", file=sys.stderr)
                _stop(child)
                return 1
            time.sleep(POLL_INTERVAL_S)
        return exit_code(child.wait())
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        if child.poll() is None:
            _stop(child)


def exit_code(returncode: int) -> int:
    """A child's return code as a shell would report it."""
    return 128 - returncode if returncode < 0 else returncode


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2.0) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError):
        return False


def _stop(child: subprocess.Popen[bytes]) -> None:
    child.terminate()
    try:
        child.wait(KILL_GRACE_S)
    except subprocess.TimeoutExpired:
        child.kill()
        child.wait()
