"""What the e2e training tests do to a run while it trains, and how they watch it: freeze or kill
its processes (the trainer, a vLLM server, the proxy and the trainer's relay mid-sync), and read
where it stands (the proxy's status, the versions TRL published, the trainer's log)."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.e2e.support import VllmServer, get_json, versions

ATTEMPTS = 6  # syncs tried until one is caught with its load in flight through both proxies
CATCH_S = 3.0  # a sync's load reaches the frozen replica well within it (health ejects at ~6 s)


def kill_proxies_during_a_sync(
    url: str, trainer: subprocess.Popen[bytes], log: Path, server: VllmServer
) -> int:
    """As a sync begins, ``server`` is frozen (SIGSTOP): the sync's load hangs at the proxy, so
    in the trainer's relay, so TRL's call at the relay. SIGKILL the relay's child and the proxy's
    child then, thaw ``server``, wait until the proxy is back. A sync that ends before it was
    caught (its load reached ``server`` first) is let go and the next one tried. Returns the
    syncs done before the kill (the one in flight must reach every replica all the same)."""
    relay = relay_url(log.read_text())
    assert server.process is not None
    group = server.process.pid  # vLLM's API server and engine: the replica's process group
    for _ in range(ATTEMPTS):
        wait_for(lambda: sync_open(log.read_text()) or trainer.poll() is not None, 120.0, 0.02)
        assert trainer.poll() is None, "training ended before a sync could be caught"
        os.killpg(group, signal.SIGSTOP)
        try:
            with contextlib.suppress(AssertionError):
                wait_for(lambda: in_flight(url, log), CATCH_S)
            if not in_flight(url, log):
                wait_for(lambda: not sync_open(log.read_text()) or trainer.poll() is not None)
                continue
            done = syncs(log)
            pids = [get_json(where + "/proxy/status")["pid"] for where in (relay, url)]
            for pid in pids:
                os.kill(pid, signal.SIGKILL)
        finally:
            os.killpg(group, signal.SIGCONT)
        wait_for(lambda old=pids[1]: proxy_back(url, old))
        return done
    raise AssertionError(f"no sync was caught with its load in flight in {ATTEMPTS} tries")


def sync_open(text: str) -> bool:
    return text.count("Weight sync: pausing") > text.count("Weight sync: done")


def in_flight(url: str, log: Path) -> bool:
    """TRL has sent its load (logged just before it; the sync's end after its answer) and the
    proxy is carrying it out."""
    text = log.read_text()
    sent = text.count("Weight sync: resuming vLLM")
    return sent > text.count("Weight sync: done") and bool(
        get_json(url + "/proxy/status")["adapters"]["loading"]
    )


def relay_url(trainer_log: str) -> str:
    found = re.search(r"proxy \(pid \d+\) ready on (\S+)", trainer_log)
    assert found is not None, "the trainer did not say where its relay listens"
    return found.group(1)


def syncs(log: Path) -> int:
    return log.read_text().count("Weight sync: done")


def proxy_back(url: str, old_pid: int) -> bool:
    try:
        status = get_json(url + "/proxy/status", timeout_s=2.0)
    except OSError:
        return False
    return status["pid"] != old_pid and all(r["routable"] for r in status["replicas"])


@contextmanager
def frozen(process: subprocess.Popen[bytes]) -> Iterator[None]:
    """SIGSTOP the process group for the block, SIGCONT after, whatever happens."""
    os.killpg(process.pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.killpg(process.pid, signal.SIGCONT)


def routable(proxy_url: str, server: VllmServer) -> bool | None:
    """Whether the proxy routes to ``server`` now (None when it does not know it)."""
    for replica in get_json(proxy_url + "/proxy/status")["replicas"]:
        if replica["url"].rstrip("/") == server.url:
            return bool(replica["routable"])
    return None


def published(out: Path) -> list[str]:
    directory = out / ".vllm_lora"
    return [p.name for p in directory.iterdir()] if directory.exists() else []


def newest(out: Path) -> int:
    return max(versions(published(out)), default=0)


def wait_for(condition: object, timeout_s: float = 240.0, poll_s: float = 0.2) -> None:
    assert callable(condition)
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(poll_s)
