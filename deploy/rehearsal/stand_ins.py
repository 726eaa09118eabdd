"""What a rehearsal runs instead of what it cannot run here, each a pure function of the plan
(``Rehearsal.stand_ins`` says each one before anything starts):

- the replicas get the CPU build's vLLM flags after the planned ones (``CPU_REPLICA_ARGS``), or,
  with ``--replica-backend sim``, the simulated replica instead of vLLM (``sim_replica_argv``):
  the same entry point (``python3 -m replica_entry``) with ``--backend sim``, the name, LoRA
  limits and adapter receiver the planned vLLM flags give, then ``--sim-args`` (the simulator's
  speed: ``--gen-token-s``, ``--later-version``/``--later-gen-token-s``, ``--max-num-seqs``, ...;
  argparse keeps the last); it needs no model and answers in seconds (the default plan with it,
  trainer included, rehearsed in 50-57 s here);
- the trainer trains ``steps`` steps of a CPU-sized recipe (``cpu_trainer_args``, after the planned
  flags: argparse keeps the last), its dataset a local file (``substitute``).

A replica a job asks the rehearsal's bridge for runs what the plan's replicas run when its
command is the planned one (``replica_substitutes``): as ``deploy up`` writes it (the Hub's model),
or with the rehearsal's model, with or without the CPU flags.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from deploy.errors import DeployError
from deploy.plan import PORT, RunPlan
from deploy.plan_jobs import replica_spec
from deploy.preflight import replica_options
from deploy.specs import JobSpec

Command = tuple[str, ...]

CPU_REPLICA_ARGS = ("--max-model-len", "512", "--dtype", "float32", "--block-size", "32")
CPU_REPLICA_ENV = {"VLLM_CPU_OMP_THREADS_BIND": "nobind", "VLLM_LOGGING_LEVEL": "INFO"}


def cpu_trainer_args(steps: int) -> tuple[str, ...]:
    return (
        *("--max-steps", str(steps), "--num-generations", "4", "--max-completion-length", "32"),
        *("--token-budget", "256", "--gradient-accumulation-steps", "1"),
        *("--weight-sync-steps", "1", "--learning-rate", "1e-3"),
    )


def substitute(args: Sequence[str], flag: str, value: str) -> tuple[str, ...]:
    """``args`` with ``flag``'s value (``--flag V`` or ``--flag=V``) replaced by ``value``."""
    out = list(args)
    for index, word in enumerate(out):
        if word == flag and index + 1 < len(out):
            out[index + 1] = value
        elif word.startswith(f"{flag}="):
            out[index] = f"{flag}={value}"
    return tuple(out)


def sim_replica_argv(plan: RunPlan, sim_args: Sequence[str]) -> list[str]:
    """The simulated replica standing in for ``plan``'s vLLM replica (the module docstring);
    ``DeployError`` when ``sim_args`` are not the simulator's flags."""
    from replica_entry.cli import build_parser, settings_from_args

    vllm = replica_options(plan)
    argv = [
        *("python3", "-m", "replica_entry", "--backend", "sim"),
        *("--host", "0.0.0.0", "--port", str(PORT), "--served-model-name", vllm.served_name),
        *("--max-loras", str(vllm.effective_max_loras)),
        *("--max-lora-rank", str(vllm.max_lora_rank)),
        *(("--max-model-len", str(vllm.max_model_len)) if vllm.max_model_len else ()),
        "--adapter-receiver" if vllm.adapter_receiver else "--no-adapter-receiver",
        *sim_args,
    ]
    parser = build_parser()
    try:
        settings_from_args(parser.parse_args(argv[3:]), parser)
    except SystemExit:
        raise DeployError(
            "--sim-args: the simulated replica refuses them (its message is above): "
            "`python -m replica_entry --backend sim --help` lists its flags"
        ) from None
    return argv


def rehearsed_replica(plan: RunPlan, index: int, sim_args: Sequence[str] | None) -> JobSpec:
    """Replica ``index`` of the rehearsed ``plan``: as planned (vLLM), or, with ``sim_args``
    (None: vLLM), the simulated replica in its command, installed as planned."""
    spec = replica_spec(plan, index)
    if sim_args is None:
        return spec
    argv = sim_replica_argv(plan, sim_args)
    return replace(spec, command=plan.install.wrap_into_image(argv, "replica"))


def replica_substitutes(
    planned: RunPlan, rehearsed: RunPlan, sim_args: Sequence[str] | None
) -> dict[Command, tuple[Command, str]]:
    """Each planned replica command (the module docstring) a job may send the bridge, to the
    command the rehearsal's replicas run and what that is."""
    runs = rehearsed_replica(rehearsed, 0, sim_args).command
    what = "the simulated replica" if sim_args is not None else "vLLM with the CPU flags"
    local_model = replace(rehearsed, replica_args=planned.replica_args)
    commands = {replica_spec(plan, 0).command for plan in (planned, local_model, rehearsed)}
    return {command: (runs, what) for command in commands if command != runs}
