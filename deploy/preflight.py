"""What ``deploy up`` checks before anything is launched, ``--dry-run`` included.

A flag only the job would reject costs the replicas' start-up before it shows (they launch first
and bill while the trainer fails on its first line), so every job's flags go through the entry
point's own parser here: the trainer's through ``trainer_entry.flags`` (with the variables the job
will have, its directories left to the job), each replica's through ``replica_entry``'s vLLM
parser. The replicas' LoRA limits follow from the trainer's recipe: ``--max-lora-rank`` the
smallest rank vLLM supports that holds the trainer's ``--lora-rank``, and ``--max-staleness``
(which sizes ``--max-loras``) the trainer's; written before ``--replica-args``, which may raise
them but not below what the trainer needs (refused, naming both flags).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, NoReturn

from deploy.errors import DeployError
from deploy.plan import RunPlan, alias_address
from deploy.plan_jobs import replica_argv, trainer_argv
from proxy.config.programs import OneLineParser, did_you_mean
from replica_entry import vllm_backend
from trainer_entry import flags, freeze
from trainer_entry.options import TrainerOptions, World

if TYPE_CHECKING:
    from _typeshed import SupportsWrite

ENTRY_ARGS = 3  # ``python3 -m <entry point>`` before the entry point's own flags


class BadFlags(DeployError):
    """A flag the job's entry point would refuse; the command exits 2, as for its own flags."""


class _Refusing(OneLineParser):
    """An entry point's parser that raises where it would print usage and exit (taking no
    abbreviation, and naming the closest flag of one it does not know, as the entry point)."""

    def error(self, message: str) -> NoReturn:
        raise BadFlags(did_you_mean(message, self.readers()))

    def exit(self, status: int = 0, message: str | None = None) -> NoReturn:
        raise BadFlags(message or "--help is not a flag of a job (run the entry point for it)")

    def print_help(self, file: SupportsWrite[str] | None = None) -> None:
        """Nothing: ``deploy``'s standard output is its own (``--dry-run``'s JSON)."""

    def print_usage(self, file: SupportsWrite[str] | None = None) -> None:
        """Nothing, as ``print_help``."""


def _with_secrets(env: Mapping[str, str], names: Sequence[str]) -> dict[str, str]:
    """The variables a job will have: its env and a stand-in value for each secret."""
    return {**env, **dict.fromkeys(names, "<secret>")}


def trainer_options(plan: RunPlan) -> TrainerOptions:
    """The trainer job's flags as ``trainer_entry`` will read them, or ``BadFlags``."""
    parser = flags.build_parser(_Refusing)
    environ = _with_secrets({}, plan.trainer_secrets)
    try:
        args = parser.parse_args(trainer_argv(plan)[ENTRY_ARGS:])
        return freeze.options_from_args(args, parser, environ, here=False)
    except BadFlags as exc:
        raise BadFlags(
            f"the trainer job would refuse its flags: {exc} (the flags after --; "
            "`python -m trainer_entry --help` lists them)"
        ) from None


def replica_options(plan: RunPlan) -> vllm_backend.VllmOptions:
    """A replica job's flags as ``replica_entry --backend vllm`` will read them, or ``BadFlags``."""
    own, extra = vllm_backend.split_passthrough(replica_argv(plan)[ENTRY_ARGS:])
    parser = vllm_backend.build_parser(_Refusing)
    try:
        args = parser.parse_args(own)
        environ = _with_secrets(plan.replica_env, plan.secrets("replica"))
        return vllm_backend.options_from_args(args, extra, parser, environ)
    except BadFlags as exc:
        raise BadFlags(
            f"the replica jobs would refuse their flags: {exc} (--replica-args; "
            "`python -m replica_entry --backend vllm --help` lists them)"
        ) from None


def lora_limits(trainer: TrainerOptions) -> tuple[str, ...]:
    """The replica flags the trainer's LoRA needs (module docstring)."""
    rank = trainer.recipe.lora_rank
    fitting = [r for r in vllm_backend.VLLM_LORA_RANKS if r >= rank]
    if not fitting:
        raise BadFlags(
            f"argument --lora-rank: vLLM serves LoRA ranks up to "
            f"{vllm_backend.VLLM_LORA_RANKS[-1]} (got {rank})"
        )
    staleness = trainer.recipe.max_staleness
    return ("--max-lora-rank", str(fitting[0]), "--max-staleness", str(staleness))


def checked(plan: RunPlan) -> RunPlan:
    """``plan`` with the replicas' LoRA limits linked to the trainer, every job's flags read by
    its own entry point; ``BadFlags`` names the first that would fail. A fleet (no trainer):
    its replicas' flags; a run on a fleet (no replicas): its trainer's."""
    if plan.shared:
        replica = replica_options(plan)
        if replica.effective_max_loras < 2:
            raise BadFlags(
                "the fleet's replicas would hold one adapter: give --max-loras 2 or more"
            )
        return plan
    trainer = trainer_options(plan)
    if str(trainer.output_dir) != plan.run_dir:
        raise BadFlags(
            f"argument --output-dir: deploy writes it ({plan.run_dir}, the run's folder of the "
            f"bucket, whose .vllm_lora the proxies watch): drop --output-dir {trainer.output_dir} "
            "from the flags after --"
        )
    world = trainer.world
    master = (
        str(alias_address(plan.alias("trainer"))) if plan.trainer_nodes > 1 else World.master_addr
    )
    if (world.nnodes, world.node_rank, world.master_addr) != (plan.trainer_nodes, 0, master):
        raise BadFlags(
            "--nnodes, --node-rank and --master-addr are deploy's to write (each trainer job "
            "gets its own): drop them from the flags after --, and use deploy's --trainer-nodes"
        )
    if plan.fleet:  # its replicas are the fleet's, already running
        return plan
    linked = replace(plan, replica_args=(*lora_limits(trainer), *plan.replica_args))
    replica = replica_options(linked)
    rank, staleness = trainer.recipe.lora_rank, trainer.recipe.max_staleness
    if replica.max_lora_rank < rank:
        raise BadFlags(
            f"--replica-args sets --max-lora-rank {replica.max_lora_rank}, below the trainer's "
            f"--lora-rank {rank}: TRL would stop at its first sync (drop it from --replica-args, "
            "deploy derives it)"
        )
    if replica.effective_max_loras <= staleness:
        raise BadFlags(
            f"the replicas hold {replica.effective_max_loras} adapters (--max-loras), not more "
            f"than the trainer's --max-staleness {staleness}: TRL would turn LoRA sync off "
            "(drop --max-loras and --max-staleness from --replica-args, deploy derives them)"
        )
    return linked
