"""Starting the ranks: one process per GPU of this machine, FSDP2 when there are several.

The trainer command (the launcher) owns the proxy side and the ranks; the ranks own the model.
- One rank in the whole run: ``python -m trainer_entry.rank`` as the launcher's child, no
  process group, no sharding (a single GPU, or the CPU).
- More: ``accelerate launch --config_file trainer_entry/fsdp2.yaml`` with this node's
  ``--num_processes``, ``--num_machines``, ``--machine_rank`` and node 0's address and port
  (torch's static rendezvous; accelerate's ``num_processes`` counts the whole run), then
  ``-m trainer_entry.rank`` in each. Every rank gets ``RANK``, ``LOCAL_RANK`` and ``WORLD_SIZE``
  from torch's launcher at its start.

Nothing outlives the launcher: the rank launcher is its child with a parent-death signal
(``proxy.lifeline``), and each rank and the rollout worker TRL spawns watch the launcher's pid
(``trainer_entry.lifeline``), because torch's launcher starts its workers in new sessions, out of
reach of a signal to the launcher's process group.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Mapping
from importlib.resources import files
from pathlib import Path

from proxy.config.programs import install_hint
from proxy.lifeline import preexec
from trainer_entry.lifeline import LAUNCHER_PID_ENV
from trainer_entry.options import OPTIONS_ENV, TrainerOptions, World

log = logging.getLogger("trainer_entry")

BASE_URL_ENV = "ROLLOUT_TRAINER_BASE_URL"
FIGURES_ENV = "ROLLOUT_TRAINER_FIGURES_URL"
FIGURES_TOKEN_ENV = "ROLLOUT_TRAINER_FIGURES_TOKEN"
# Exit codes of a rank that the launcher passes on (anything else is a crash, reported as 1).
EXIT_OUT_OF_MEMORY = 3
EXIT_BAD_INPUT = 2


class MissingExtra(RuntimeError):
    """The heavy packages are not installed here."""


# What every rank imports (trainer_entry.train): their absence is told before anything starts.
TRAINER_PACKAGES = ("torch", "trl", "peft")
MISSING_EXTRA = f"needs torch, trl and peft: {install_hint('trainer')}"


def check_trainer_packages(find: Callable[[str], object | None] = importlib.util.find_spec) -> None:
    """MissingExtra unless every one of ``TRAINER_PACKAGES`` is installed (found, not imported:
    torch alone takes seconds to import)."""
    if any(find(name) is None for name in TRAINER_PACKAGES):
        raise MissingExtra(MISSING_EXTRA)


def fsdp_config() -> Path:
    return Path(str(files("trainer_entry").joinpath("fsdp2.yaml")))


def machine_gpus() -> int:
    """CUDA devices this process can see (0 without CUDA)."""
    try:
        import torch
    except ImportError as exc:
        raise MissingExtra(MISSING_EXTRA) from exc
    return int(torch.cuda.device_count()) if torch.cuda.is_available() else 0


# Without CUDA a rank's OpenMP threads compete for the cores with the rollout worker and, on one
# machine, with vLLM: one rank with the default (every core) spent 8.9 s in forward and backward
# per e2e step, 0.24 s with one thread (torch's launcher sets 1 for several ranks itself).
CPU_THREADS_PER_RANK = "1"


def with_processes(world: World, gpus: int) -> World:
    """``world`` with this node's rank count decided: the flag, else every GPU (1 without)."""
    if world.num_processes:
        return world
    return World(max(gpus, 1), world.nnodes, world.node_rank, world.master_addr, world.master_port)


def rank_command(world: World, gpus: int) -> list[str]:
    """The command that starts this node's ranks."""
    rank = ["-m", "trainer_entry.rank"]
    if world.world_size == 1:
        return [sys.executable, *rank]
    return [
        *(sys.executable, "-m", "accelerate.commands.launch", "--config_file", str(fsdp_config())),
        *("--num_processes", str(world.world_size), "--num_machines", str(world.nnodes)),
        *("--machine_rank", str(world.node_rank), "--main_process_ip", world.master_addr),
        *("--main_process_port", str(world.master_port)),
        *(("--mixed_precision", "no") if gpus == 0 else ()),
        *rank,
    ]


def run_ranks(
    options: TrainerOptions, gpus: int, base_url: str, figures: tuple[str | None, str | None]
) -> int:
    """Run this node's ranks to the end; returns the exit code the trainer command should end
    with (0, ``EXIT_BAD_INPUT``, ``EXIT_OUT_OF_MEMORY``, else 1). SIGTERM and SIGINT are passed
    on to the rank launcher, which passes them to every rank."""
    env = ranks_environ(options, gpus, base_url, figures, os.environ)
    argv = rank_command(options.world, gpus)
    log.info("starting %s", _describe(options.world))
    child = subprocess.Popen(argv, env=env, preexec_fn=preexec(signal.SIGKILL))
    previous = {sig: signal.signal(sig, _forward(child)) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        code = child.wait()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return code if code in (0, EXIT_BAD_INPUT, EXIT_OUT_OF_MEMORY) else 1


def ranks_environ(
    options: TrainerOptions,
    gpus: int,
    base_url: str,
    figures: tuple[str | None, str | None],
    environ: Mapping[str, str],
) -> dict[str, str]:
    """What the ranks start with: ``environ``, the options, the launcher's pid, where TRL talks
    to, and on CPU one OpenMP thread a rank unless ``OMP_NUM_THREADS`` is set already."""
    figures_url, figures_token = figures
    env: dict[str, str] = {
        **environ,
        OPTIONS_ENV: options.to_json(),
        LAUNCHER_PID_ENV: str(os.getpid()),
        BASE_URL_ENV: base_url,
        **({FIGURES_ENV: figures_url} if figures_url else {}),
        **({FIGURES_TOKEN_ENV: figures_token} if figures_token else {}),
    }
    if gpus == 0 and "OMP_NUM_THREADS" not in env:
        env["OMP_NUM_THREADS"] = CPU_THREADS_PER_RANK
        log.info("no CUDA: each rank computes on %s thread (OMP_NUM_THREADS)", CPU_THREADS_PER_RANK)
    return env


def rank_env(environ: Mapping[str, str]) -> tuple[str, tuple[str | None, str | None]]:
    """In a rank: the base URL TRL talks to, and where the proxy's figures are read."""
    return environ.get(BASE_URL_ENV, ""), (
        environ.get(FIGURES_ENV),
        environ.get(FIGURES_TOKEN_ENV),
    )


def _describe(world: World) -> str:
    if world.world_size == 1:
        return "1 rank (no sharding)"
    nodes = f" on node {world.node_rank} of {world.nnodes}" if world.nnodes > 1 else ""
    return (
        f"{world.num_processes} FSDP2 rank(s){nodes}, {world.world_size} in the run "
        f"(rendezvous {world.master_addr}:{world.master_port})"
    )


def _forward(child: subprocess.Popen[bytes]) -> signal.Handlers:
    def handler(signum: int, _frame: object) -> None:
        if child.poll() is None:
            child.send_signal(signum)

    return handler  # type: ignore[return-value]
