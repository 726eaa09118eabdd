"""Helpers of the end-to-end tier: real vLLM CPU servers, the proxy, the trainer, as processes.

Every process is started in its own session so that it and its children (vLLM's engine core)
can be ended together by process-group id; every wait is bounded. What a replica did is read
from its own log: vLLM logs ``Loaded new LoRA adapter: name 'X'``, ``Removed LoRA adapter:
name 'X'`` and one access line per request, in order.

Every replica demands ``Authorization: Bearer REPLICA_TOKEN`` on its ``/v1`` routes (vLLM's API
key, given through ``VLLM_API_KEY``, never on a command line), as an HF Job's exposed port
demands an HF token: whatever talks to a replica here must send it, and the helpers below do.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from importlib.util import find_spec
from pathlib import Path
from typing import Any

PYTHON = sys.executable
READY = "replica ready on "
REPLICA_TOKEN = "hf_e2e_replica_token_0123456789"
AUTH = {"Authorization": f"Bearer {REPLICA_TOKEN}"}
_LOADED = re.compile(r"Loaded new LoRA adapter: name '(?P<name>[^']+)', path '(?P<path>[^']+)'")
_EVENT = re.compile(
    r"Loaded new LoRA adapter: name '(?P<load>[^']+)'"
    r"|Removed LoRA adapter: name '(?P<unload>[^']+)'"
    r'|"POST /v1/completions HTTP/1.1" (?P<status>\d+)'
    r'|"POST /(?P<control>pause|resume)\b'
)


def heavy_tier_missing() -> str | None:
    """Why the e2e tier cannot run in this interpreter, or None."""
    for module in ("vllm", "trl", "peft", "torch"):
        if find_spec(module) is None:
            return f"{module} is not installed here (make e2e installs the heavy tier)"
    return None


@dataclass(frozen=True)
class Event:
    """One line of a replica's log that matters: a load, an unload, a completion request, or a
    pause or resume that reached it."""

    kind: str  # "load" | "unload" | "completion" | "control"
    value: str  # adapter name, the HTTP status of a completion, or "pause" | "resume"


def events(log_text: str) -> list[Event]:
    out = []
    for match in _EVENT.finditer(log_text):
        if match["load"]:
            out.append(Event("load", match["load"]))
        elif match["unload"]:
            out.append(Event("unload", match["unload"]))
        elif match["control"]:
            out.append(Event("control", match["control"]))
        else:
            out.append(Event("completion", match["status"]))
    return out


def loaded_from(log_text: str) -> dict[str, list[str]]:
    """Each adapter name a replica loaded, with the paths it loaded it from, in order."""
    found: dict[str, list[str]] = {}
    for match in _LOADED.finditer(log_text):
        found.setdefault(match["name"], []).append(match["path"])
    return found


@dataclass
class VllmServer:
    """A real vLLM CPU server started through ``replica_entry --backend vllm``."""

    port: int
    model_dir: Path
    log_path: Path
    max_staleness: int
    max_loras: int | None = None  # replica_entry's default: max_staleness + 2
    threads_bind: str = "nobind"  # VLLM_CPU_OMP_THREADS_BIND: cores for the engine's threads
    process: subprocess.Popen[bytes] | None = None
    starts: list[int] = field(default_factory=list)  # log offsets where each start begins

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def store(self) -> Path:
        """The adapter receiver's store (emptied at every start)."""
        return self.log_path.with_name(f"{self.log_path.stem}-adapters")

    def stored(self, path: str) -> bool:
        """Whether ``path`` is in this replica's receiver store (a pushed copy)."""
        return Path(path).resolve().parent.parent == self.store.resolve()

    def start(self) -> None:
        argv = [
            *(PYTHON, "-m", "replica_entry", "--backend", "vllm"),
            *("--model", str(self.model_dir), "--host", "127.0.0.1", "--port", str(self.port)),
            *("--max-lora-rank", "8", "--max-staleness", str(self.max_staleness)),
            *("--max-model-len", "512", "--dtype", "float32", "--block-size", "32"),
            *("--ready-timeout", "240", "--adapter-store", str(self.store)),
        ]
        if self.max_loras is not None:
            argv += ["--max-loras", str(self.max_loras)]
        self.starts.append(self.log_path.stat().st_size if self.log_path.exists() else 0)
        log = self.log_path.open("ab")
        # vLLM's CPU build binds every server's OpenMP threads to the same cores by default; two
        # servers and a trainer on a 2-core machine then starve each other (restarts take
        # minutes): the tier gives each server its own core (``conftest.fleet``).
        # The tier reads vLLM's INFO lines (loads, unloads): set its level, never inherit one
        # (importing TRL in this process sets VLLM_LOGGING_LEVEL=ERROR in os.environ).
        env = {
            **os.environ,
            "VLLM_CPU_OMP_THREADS_BIND": self.threads_bind,
            "VLLM_API_KEY": REPLICA_TOKEN,
            "VLLM_LOGGING_LEVEL": "INFO",
        }
        self.process = subprocess.Popen(
            argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env=env
        )
        log.close()

    def wait_ready(self, timeout_s: float = 240.0) -> None:
        deadline = time.monotonic() + timeout_s
        while READY not in self.log_since_start():
            assert self.process is not None and self.process.poll() is None, self.tail()
            assert time.monotonic() < deadline, f"vLLM not ready in {timeout_s} s\n{self.tail()}"
            time.sleep(0.5)

    def kill(self) -> None:
        """SIGKILL the whole process group: a crash, not a shutdown."""
        self._signal_group(signal.SIGKILL)

    def stop(self) -> None:
        """SIGTERM (forwarded to vLLM by replica_entry), then SIGKILL after 30 s."""
        if self.process is None or self.process.poll() is not None:
            self._signal_group(signal.SIGKILL)
            return
        self.process.send_signal(signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(30)
        self._signal_group(signal.SIGKILL)

    def log_since_start(self, start: int = -1) -> str:
        raw = self.log_path.read_bytes() if self.log_path.exists() else b""
        return raw[self.starts[start] if self.starts else 0 :].decode(errors="replace")

    def tail(self, lines: int = 40) -> str:
        return "\n".join(self.log_since_start().splitlines()[-lines:])

    def _signal_group(self, signum: signal.Signals) -> None:
        if self.process is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signum)
        self.process.wait(30)


def get_json(url: str, timeout_s: float = 10.0) -> Any:
    with urllib.request.urlopen(urllib.request.Request(url, headers=AUTH), timeout=timeout_s) as r:
        return json.loads(r.read())


def get_text(url: str, timeout_s: float = 10.0) -> str:
    with urllib.request.urlopen(urllib.request.Request(url, headers=AUTH), timeout=timeout_s) as r:
        text: str = r.read().decode()
        return text


def post_json(url: str, body: Any, timeout_s: float = 30.0) -> int:
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json", **AUTH}
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            status: int = response.status
            return status
    except urllib.error.HTTPError as error:
        return error.code


def adapters_listed(server_url: str) -> list[str]:
    """The adapter names a replica lists on ``/v1/models`` (the base model left out)."""
    return [card["id"] for card in get_json(server_url + "/v1/models")["data"][1:]]


def metric_sum(text: str, name: str, **labels: str) -> float:
    """Sum of a Prometheus metric's samples whose labels include ``labels``."""
    total = 0.0
    for line in text.splitlines():
        if not line.startswith(name + "{") and not line.startswith(name + " "):
            continue
        if all(f'{key}="{value}"' in line for key, value in labels.items()):
            total += float(line.rsplit(" ", 1)[1])
    return total


def run_trainer(
    argv: list[str], log_path: Path, env: dict[str, str] | None = None
) -> subprocess.Popen[bytes]:
    """Start ``python -m trainer_entry ARGV``; the caller bounds the wait (``wait_or_kill``)."""
    log = log_path.open("wb")
    process = subprocess.Popen(
        [PYTHON, "-m", "trainer_entry", *argv],
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        env={**os.environ, "TRL_EXPERIMENTAL_SILENCE": "1", **(env or {})},
    )
    log.close()
    return process


def wait_or_kill(process: subprocess.Popen[bytes], timeout_s: float) -> int:
    """The process's exit code; killed (with its group) when it outlives ``timeout_s``."""
    try:
        return process.wait(timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(30)
        raise


def versions(names: list[str] | set[str]) -> list[int]:
    return sorted(int(n.rsplit("-v", 1)[1]) for n in names if re.fullmatch(r"trl-policy-v\d+", n))


_PERF = re.compile(r"'(perf/[a-z_]+)': '?([0-9.eE+-]+)'?")


def report_perf(log_text: str, title: str) -> dict[str, float]:
    """TRL's own per-step figures (``perf/*`` in its log lines): the median of each, printed
    (``make e2e`` shows what passed tests print) and returned."""
    found: dict[str, list[float]] = {}
    for name, value in _PERF.findall(log_text):
        found.setdefault(name, []).append(float(value))
    medians = {name: sorted(vs)[len(vs) // 2] for name, vs in sorted(found.items())}
    print(f"\nTRL perf/* medians ({title}):")
    for name, value in medians.items():
        print(f"  {name:<34} {value:10.3f}  ({len(found[name])} steps)")
    return medians


def all_routable(proxy_url: str, count: int, timeout_s: float = 120.0) -> None:
    """Until the proxy routes to ``count`` replicas (it admits each after bringing it in step)."""
    deadline = time.monotonic() + timeout_s
    while sum(r["routable"] for r in get_json(proxy_url + "/proxy/status")["replicas"]) < count:
        assert time.monotonic() < deadline, f"not all replicas routable in {timeout_s} s"
        time.sleep(0.2)
