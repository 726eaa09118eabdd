"""One leg of the learning benchmark: real vLLM CPU servers, the trainer (real TRL), and, for the
fleet leg, the proxy beside the trainer (``--replica-urls``, the mission's topology on one
machine); for the direct leg, the trainer pointed straight at one vLLM server.

Every process is started in its own session, dies with the benchmark (a lifeline: SIGTERM when
its parent goes, however it goes) and is ended by process group; every wait is bounded
(``READY_S``, the leg's ``timeout_s``). The trainer's log is read as it grows: each training
step's figures (TRL's own log line) are printed as they come, so a run shows its progress.
"""

from __future__ import annotations

import ast
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from proxy.lifeline import preexec
from trainer_entry.sidecar import free_port

READY = "replica ready on "
READY_S = 300.0
POLL_S = 0.5
STOP_S = 30.0
FIGURES = ("reward", "reward_std", "kl", "ratio", "entropy")


@dataclass(frozen=True)
class Leg:
    name: str  # "fleet" | "direct"
    replicas: int
    via_proxy: bool


FLEET = Leg("fleet", 2, True)
DIRECT = Leg("direct", 1, False)


@dataclass
class Outcome:
    leg: str
    steps: list[dict[str, float]] = field(default_factory=list)  # TRL's figures, step by step
    wall_s: float = 0.0
    proxy_log: list[str] = field(default_factory=list)  # the sidecar proxy's policy lines


class LegFailed(RuntimeError):
    """A leg that did not finish; the message says where its logs are."""


def _python() -> str:
    return sys.executable


@contextlib.contextmanager
def vllm_servers(model: Path, count: int, logs: Path) -> Iterator[list[str]]:
    """``count`` vLLM CPU servers of ``model`` (``replica_entry --backend vllm``), each bound to
    its own core; yields their URLs once every one is ready."""
    cores = os.cpu_count() or 1
    processes: list[tuple[subprocess.Popen[bytes], Path]] = []
    urls = []
    try:
        for i in range(count):
            port = free_port()
            log_path = logs / f"vllm-{i}.log"
            argv = [
                *(_python(), "-m", "replica_entry", "--backend", "vllm", "--model", str(model)),
                *("--host", "127.0.0.1", "--port", str(port), "--max-lora-rank", "8"),
                *("--max-model-len", "512", "--dtype", "float32", "--block-size", "32"),
                *("--ready-timeout", str(int(READY_S)), "--max-staleness", "1"),
            ]  # fmt: skip
            env = {**os.environ, "VLLM_CPU_OMP_THREADS_BIND": str(i % cores),
                   "VLLM_LOGGING_LEVEL": "INFO"}  # fmt: skip
            with log_path.open("wb") as out:
                process = subprocess.Popen(
                    argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True, env=env,
                    preexec_fn=preexec(signal.SIGTERM),
                )  # fmt: skip
            processes.append((process, log_path))
            urls.append(f"http://127.0.0.1:{port}")
        deadline = time.monotonic() + READY_S
        for process, log_path in processes:
            while READY not in log_path.read_text(errors="replace"):
                if process.poll() is not None or time.monotonic() > deadline:
                    raise LegFailed(f"a vLLM server did not start: see {log_path}")
                time.sleep(POLL_S)
        yield urls
    finally:
        for process, _ in processes:
            _stop(process)


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(STOP_S)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(STOP_S)


def trainer_argv(leg: Leg, urls: Sequence[str], settings: dict[str, Any], out: Path) -> list[str]:
    """The trainer's command for ``leg`` (``settings``: the run's model, data and recipe)."""
    where = (
        ["--replica-urls", ",".join(urls)]
        if leg.via_proxy
        else ["--proxy-url", urls[0], "--adapters-in-bucket"]
    )
    return [
        *(_python(), "-m", "trainer_entry", "--model", str(settings["model"])),
        *("--dataset", str(settings["dataset"]), "--output-dir", str(out)),
        *("--rewards", "benchmarks.learn.task:digit_share", "--format-instruction", ""),
        *("--max-steps", str(settings["steps"]), "--seed", str(settings["seed"])),
        *("--num-generations", str(settings["generations"])),
        *("--lora-rank", str(settings["lora_rank"])),
        *("--learning-rate", str(settings["learning_rate"])),
        *("--max-completion-length", str(settings["completion_tokens"])),
        *("--max-staleness", str(settings["max_staleness"]), "--weight-sync-steps", "1"),
        *("--gradient-accumulation-steps", "1", "--token-budget", "1024"),
        *where,
        *settings.get("trainer_args", ()),
    ]  # fmt: skip


def figures_of(line: str) -> dict[str, float] | None:
    """A training step's figures from TRL's log line (a dict printed with string values)."""
    start = line.find("{'loss'")
    if start < 0:
        return None
    try:
        logged = ast.literal_eval(line[start : line.rindex("}") + 1])
    except (ValueError, SyntaxError):
        return None
    if not isinstance(logged, dict) or "reward" not in logged:
        return None
    return {k: float(logged[k]) for k in FIGURES if k in logged}


def run_leg(
    leg: Leg,
    settings: dict[str, Any],
    work: Path,
    timeout_s: float,
    say: Any = print,
    through: Callable[[list[str]], list[str]] | None = None,
) -> Outcome:
    """Start the leg's servers, train to the end, and return TRL's figures step by step.
    ``through``: the URLs the trainer is given for the servers' (a test's shim in front of
    one); the servers' own by default."""
    logs = work / leg.name
    shutil.rmtree(logs, ignore_errors=True)  # a fresh run: no checkpoint of an earlier one resumed
    logs.mkdir(parents=True)
    outcome = Outcome(leg.name)
    started = time.monotonic()
    with vllm_servers(Path(settings["model"]), leg.replicas, logs) as servers:
        ready_s = time.monotonic() - started
        say(f"  {leg.name}: {leg.replicas} vLLM server(s) ready ({ready_s:.0f} s)")
        urls = through(servers) if through is not None else servers
        argv = trainer_argv(leg, urls, settings, logs / "run")
        log_path = logs / "trainer.log"
        with log_path.open("wb") as out:
            trainer = subprocess.Popen(
                argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                preexec_fn=preexec(signal.SIGTERM),
            )  # fmt: skip
        try:
            _follow(trainer, log_path, outcome, started + timeout_s, say)
        finally:
            _stop(trainer)
        text = log_path.read_text(errors="replace")
        outcome.proxy_log = [x for x in text.splitlines() if "proxy.adapters" in x]
        if trainer.returncode != 0:
            raise LegFailed(
                f"the {leg.name} leg's trainer exited {trainer.returncode}: see {log_path}"
            )
    outcome.wall_s = time.monotonic() - started
    return outcome


def _follow(
    trainer: subprocess.Popen[bytes], log_path: Path, outcome: Outcome, deadline: float, say: Any
) -> None:
    """Read the trainer's log as it grows until it exits; each step's figures said once."""
    offset, pending = 0, ""
    while True:
        done = trainer.poll() is not None
        with log_path.open("rb") as log:
            log.seek(offset)
            chunk = log.read()
        offset += len(chunk)
        pending += chunk.decode(errors="replace")
        *lines, pending = pending.split("\n")
        for line in lines:
            step = figures_of(line)
            if step is not None:
                outcome.steps.append(step)
                say(f"  {outcome.leg} step {len(outcome.steps)}: reward {step['reward']:.3f}  "
                    f"kl {step.get('kl', 0.0):.4f}")  # fmt: skip
        if done:
            return
        if time.monotonic() > deadline:
            raise LegFailed(f"the {outcome.leg} leg ran past its time: see {log_path}")
        time.sleep(POLL_S)
