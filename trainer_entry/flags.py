"""The trainer's command line: flags -> ``TrainerOptions``, with nothing heavy imported.

Every recipe value is a flag whose default is the fastest published run (``trainer_entry.recipe``);
``--help`` shows each default. A bad value exits 2 naming its flag (argparse's ``error``).
``deploy`` checks a plan's trainer arguments with this same parser before launching anything.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping
from dataclasses import fields
from pathlib import Path
from typing import Any, TypeVar

from proxy.config.programs import DefaultsFormatter, OneLineParser, version_flag
from proxy.config.units import DurationArg
from trainer_entry.inputs import BadInput, first_prompt
from trainer_entry.options import Checkpoints, Topology, TrainerOptions, World
from trainer_entry.prompts import AUTO, asked_shape, default_rewards, instruction_for
from trainer_entry.recipe import CPU_SIZES, Recipe
from trainer_entry.rewards import REWARD_NAMES, is_custom
from trainer_entry.templates import FAMILIES

T = TypeVar("T")

DESCRIPTION = "TRL's AsyncGRPOTrainer with a LoRA, on every GPU of the machine, through the proxy"
EPILOG = (
    "Variables: the replicas' token in HF_TOKEN (--replica-token-env names another; "
    "PROXY_UPSTREAM_TOKEN, when set, wins), passed to the sidecar proxy; the variables "
    "--proxy-token-env and --fleet-key-env name. Earlier flag names still work: "
    "--sidecar-replicas (--replica-urls), --sidecar-discover (--discover), --server-timeout "
    "(--ready-timeout)."
)


def build_parser(
    parser_class: type[argparse.ArgumentParser] = OneLineParser,
) -> argparse.ArgumentParser:
    """The trainer's parser (``parser_class``: deploy's, which raises instead of exiting)."""
    parser = parser_class(
        prog="rollout-trainer",
        description=DESCRIPTION,
        formatter_class=DefaultsFormatter,
        epilog=EPILOG,
    )
    version_flag(parser)
    add = parser.add_argument
    add("--model", required=True, help="Hub id or local directory of the base model")
    add("--dataset", required=True, help="Hub dataset id, or a local .jsonl/.json/.parquet file")
    add("--dataset-config", default=None, help="the Hub dataset's configuration (e.g. main)")
    add("--dataset-split", default="train", help="the Hub dataset's split")
    add(
        "--prompt-column",
        default="prompt",
        help="its column: messages, or text wrapped as a user turn",
    )
    add("--answer-column", default="answer", help="its column of reference answers (math, boxed)")
    add("--system-prompt", default=None, help="system turn added to text prompts")
    add(
        "--rewards",
        default=AUTO,
        help=f"comma-separated, from {', '.join(REWARD_NAMES)} or module:function (your own); "
        "auto: what a local dataset's prompts ask for (Answer: N -> math,format), else boxed",
    )
    add(
        "--format-instruction",
        default=AUTO,
        help="added to each prompt's system turn, asking for the answer shape the rewards read; "
        'auto: the one for --rewards (docs/trainer.md, "Training data and rewards"), "": none',
    )
    add(
        "--response-template",
        default=None,
        help=f"when TRL does not know the model's chat template: {', '.join(FAMILIES)} or a "
        "JSON file (default: told from the template's markers)",
    )
    add(
        "--output-dir",
        type=Path,
        required=True,
        help="checkpoints and .vllm_lora (the bucket's mount in a job)",
    )
    add("--max-steps", type=int, default=500, help="training steps")
    add("--seed", type=int, default=0, help="TRL's seed")
    add(
        "--report-to",
        default="none",
        help="TRL's trackers (wandb, trackio, ...); proxy figures too",
    )
    add(
        "--ready-timeout",
        "--server-timeout",
        dest="server_timeout",
        type=DurationArg(positive=True),
        default="4m",
        help="how long to wait for the proxy's /health",
    )
    _topology_flags(parser)
    _world_flags(parser)
    _checkpoint_flags(parser)
    _recipe_flags(parser)
    return parser


def _topology_flags(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group(
        "where the replicas are (node 0 only; one of --replica-urls, --discover, --proxy-url)"
    )
    where = group.add_mutually_exclusive_group(required=True)
    where.add_argument(
        "--replica-urls",
        "--sidecar-replicas",
        dest="sidecar_replicas",
        default=None,
        metavar="URLS",
        help="a sidecar proxy in front of these replicas: their URLs, comma-separated",
    )
    where.add_argument(
        "--discover",
        "--sidecar-discover",
        dest="sidecar_discover",
        default=None,
        metavar="SPEC",
        help="a sidecar proxy that finds the replicas as the proxy's --discover does "
        "(dns:NAME:PORT: every address NAME resolves to, e.g. an HF Jobs network group's alias)",
    )
    where.add_argument("--proxy-url", default=None, help="a proxy running elsewhere")
    add = group.add_argument
    add("--proxy-token-env", default=None, help="variable holding the remote proxy's token")
    add(
        "--fleet-key-env",
        default=None,
        help="a run on a shared fleet: declare it on the proxy of --proxy-url (which ends in "
        "/runs/<run>) with the fleet's admin key in this variable before training, and remove "
        "it (its adapters unloaded) when the run ends (default: none, the run is declared)",
    )
    add(
        "--run-weight",
        type=float,
        default=1.0,
        help="with --fleet-key-env: the run's weight, its share of the fleet's max_loras and "
        "of the proxy's slots",
    )
    add(
        "--replica-token-env", default="HF_TOKEN", help="sidecar: variable with the replicas' token"
    )
    add("--sidecar-host", default="127.0.0.1", help="sidecar: where the proxy listens")
    add("--sidecar-port", type=int, default=0, help="sidecar: its port (0: a free one)")
    add("--proxy-arg", action="append", default=[], help="passed to the local proxy (repeatable)")
    add(
        "--adapters-local",
        type=Path,
        default=None,
        help="where TRL saves each adapter version on this machine (default: a fresh directory "
        "in its temp dir); the local proxy pushes it from there and copies it into "
        "<output-dir>/.vllm_lora in the background",
    )
    add(
        "--adapters-in-bucket",
        action="store_true",
        help="TRL saves each adapter version straight into <output-dir>/.vllm_lora instead",
    )


def _world_flags(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("ranks (FSDP2 when more than one)")
    add = group.add_argument
    add(
        "--num-processes",
        type=int,
        default=None,
        help="ranks on this machine (default: its GPUs; 1 without CUDA)",
    )
    add("--nnodes", type=int, default=1, help="machines in the run (torch's static rendezvous)")
    add("--node-rank", type=int, default=0, help="this machine's index; 0 runs the proxy side")
    add("--master-addr", default="127.0.0.1", help="node 0's address, reachable by every node")
    add("--master-port", type=int, default=29500, help="node 0's rendezvous port")


def _checkpoint_flags(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("checkpoints (into --output-dir) and resume")
    add = group.add_argument
    defaults = Checkpoints()
    add("--save-steps", type=int, default=defaults.save_steps, help="checkpoint every N steps")
    add(
        "--save-minutes",
        type=DurationArg(unit="min"),
        default=defaults.save_minutes,
        help="also checkpoint once this long passed since the last (a bare number: minutes; "
        "0: never by time)",
    )
    add("--save-total-limit", type=int, default=defaults.save_total_limit, help="the newest N kept")
    add(
        "--resume",
        default=defaults.resume,
        help="auto: the newest complete checkpoint, else a fresh start; never; or a checkpoint",
    )


def _recipe_flags(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("the recipe (defaults: the fastest published run)")
    add = group.add_argument
    r = Recipe()
    add("--learning-rate", type=float, default=r.learning_rate, help="the LoRA's")
    add("--lr-scheduler", default=r.lr_scheduler, help="transformers' lr_scheduler_type")
    add("--adam-beta2", type=float, default=r.adam_beta2, help="AdamW's beta2")
    add("--lora-rank", type=int, default=r.lora_rank, help="the adapter's rank")
    add("--lora-alpha", type=int, default=None, help="the adapter's alpha (default: 2 x rank)")
    add(
        "--lora-target-modules",
        default=",".join(r.lora_target_modules),
        help="comma-separated module names, or all-linear",
    )
    add("--num-generations", type=int, default=r.num_generations, help="rollouts per prompt")
    add(
        "--batch-size",
        type=int,
        default=None,
        help="samples per rank per micro-batch (default: a group)",
    )
    cpu = CPU_SIZES
    add(
        "--gradient-accumulation-steps",
        type=int,
        default=None,
        help=f"micro-batches per optimizer step (default: {r.gradient_accumulation_steps}; "
        f"{cpu['gradient_accumulation_steps']} without CUDA)",
    )
    add(
        "--token-budget",
        type=int,
        default=None,
        help=f"tokens per rank per micro-batch (default: {r.token_budget}; "
        f"{cpu['token_budget']} without CUDA)",
    )
    add(
        "--gradient-checkpointing",
        action=argparse.BooleanOptionalAction,
        default=r.gradient_checkpointing,
        help="recompute activations: less memory, about a third more time per step",
    )
    add(
        "--max-completion-length",
        type=int,
        default=None,
        help=f"tokens a rollout may generate (default: {r.max_completion_length}; "
        f"{cpu['max_completion_length']} without CUDA)",
    )
    add("--temperature", type=float, default=r.temperature, help="sampling temperature")
    add("--max-staleness", type=int, default=r.max_staleness, help="steps a rollout may lag")
    add("--weight-sync-steps", type=int, default=r.weight_sync_steps, help="steps between syncs")
    add(
        "--queue-maxsize",
        type=int,
        default=None,
        help="TRL's rollout queue (default: max-staleness x samples/step)",
    )
    add(
        "--max-inflight-tasks",
        type=int,
        default=None,
        help="rollouts in flight (default: a third of max-staleness x weight-sync-steps in "
        "steps' worth of samples, at most max-staleness x samples/step: the fleet what-if's "
        "choice within 3 %% waste)",
    )


_POSITIVE = (
    "lora_rank",
    "max_steps",
    "num_generations",
    "weight_sync_steps",
    "gradient_accumulation_steps",
    "max_completion_length",
    "nnodes",
    "save_steps",
    "save_total_limit",
)


def _section(kind: type[T], args: argparse.Namespace, **overrides: Any) -> T:
    """A frozen options section from the flags named as its fields (``overrides`` win)."""
    named = [spec.name for spec in fields(kind) if spec.name not in overrides]  # type: ignore[arg-type]
    return kind(**{name: getattr(args, name) for name in named}, **overrides)


def _check_fleet_run(
    parser: argparse.ArgumentParser, args: argparse.Namespace, environ: Mapping[str, str]
) -> None:
    """``--fleet-key-env``: only with a --proxy-url naming a run, its key set on node 0."""
    if args.proxy_url is None:
        parser.error("argument --fleet-key-env: only with --proxy-url (the fleet's /runs/<run>)")
    from trainer_entry.fleet_run import FleetRun  # stdlib only

    try:
        FleetRun.of(args.proxy_url)
    except ValueError as exc:
        parser.error(f"argument --proxy-url: {exc}")
    if args.node_rank == 0 and not environ.get(args.fleet_key_env):
        parser.error(f"argument --fleet-key-env: ${args.fleet_key_env} is not set")
    if not (0 < args.run_weight <= 1000):  # proxy.runs.table.MAX_WEIGHT
        parser.error(f"argument --run-weight: above 0, at most 1000 (got {args.run_weight:g})")


def options_from_args(
    args: argparse.Namespace,
    parser: argparse.ArgumentParser,
    environ: Mapping[str, str] | None = None,
    *,
    here: bool = True,
) -> TrainerOptions:
    """Validate and freeze; a bad value exits 2 naming its flag.

    ``environ``: the variables the trainer will have (default: this process's); ``here=False``:
    the flags of a job that runs elsewhere (``deploy`` checking a plan), whose directories are
    not on this machine."""
    environ = os.environ if environ is None else environ
    # A size left unset is the GPU recipe's here; the launcher decides it on its machine.
    machine_sized = tuple(name for name in CPU_SIZES if getattr(args, name) is None)
    for name in machine_sized:
        setattr(args, name, getattr(Recipe(), name))
    rewards = tuple(name.strip() for name in args.rewards.split(",") if name.strip())
    if rewards == (AUTO,):  # the rewards the prompts ask for (trainer_entry.prompts)
        try:
            prompt = first_prompt(args.dataset, args.prompt_column) if here else None
        except BadInput as exc:
            parser.error(f"argument --dataset: {exc}")
        rewards = default_rewards(asked_shape(prompt))
    unknown = sorted(n for n in rewards if n not in REWARD_NAMES and not is_custom(n))
    if not rewards or unknown:
        parser.error(
            f"argument --rewards: choose from {', '.join(REWARD_NAMES)} or name a "
            f"module:function (got {args.rewards!r})"
        )
    for name in _POSITIVE:
        if getattr(args, name) < 1:
            parser.error(
                f"argument --{name.replace('_', '-')}: must be >= 1 (got {getattr(args, name)})"
            )
    for name in ("max_staleness", "token_budget", "save_minutes"):
        if getattr(args, name) < 0:
            parser.error(f"argument --{name.replace('_', '-')}: must be >= 0")
    for name in ("num_processes", "batch_size", "queue_maxsize", "max_inflight_tasks"):
        value = getattr(args, name)
        if value is not None and value < 1:
            parser.error(f"argument --{name.replace('_', '-')}: must be >= 1 (got {value})")
    if not 0 <= args.node_rank < args.nnodes:
        parser.error(f"argument --node-rank: 0 to --nnodes - 1 (got {args.node_rank})")
    for flag in ("sidecar_port", "master_port"):
        if not 0 <= getattr(args, flag) <= 65535:
            parser.error(
                f"argument --{flag.replace('_', '-')}: 0 to 65535 (got {getattr(args, flag)})"
            )
    if args.resume not in ("auto", "never") and here and not Path(args.resume).is_dir():
        parser.error(
            f"argument --resume: auto, never, or a checkpoint directory (got {args.resume!r})"
        )
    if args.proxy_token_env is not None:
        if args.proxy_url is None:
            parser.error("argument --proxy-token-env: only with --proxy-url")
        if args.node_rank == 0 and not environ.get(args.proxy_token_env):
            parser.error(f"argument --proxy-token-env: ${args.proxy_token_env} is not set")
    if args.fleet_key_env is not None:
        _check_fleet_run(parser, args, environ)
    if args.adapters_local is not None and args.adapters_in_bucket:
        parser.error("argument --adapters-in-bucket: not with --adapters-local")
    replicas = tuple(u.strip() for u in (args.sidecar_replicas or "").split(",") if u.strip())
    if args.sidecar_replicas is not None and not replicas:
        parser.error("argument --replica-urls: give at least one URL")
    # The URLs the local proxy (sidecar, relay) would refuse, before it is started (deploy's
    # plan has placeholders for them: not checked there).
    upstreams = [("--replica-urls", url) for url in replicas]
    upstreams += [("--proxy-url", args.proxy_url)] if args.proxy_url is not None else []
    if here and upstreams:
        from proxy.config import check_replica_url

        for flag, url in upstreams:
            try:
                check_replica_url(url)
            except ValueError as exc:
                parser.error(f"argument {flag}: {exc}")
    if args.sidecar_discover is not None:
        # Only here: proxy.config brings pydantic, and this parser imports nothing heavy.
        from proxy.config import parse_discover_spec

        try:
            parse_discover_spec(args.sidecar_discover)
        except ValueError as exc:
            parser.error(f"argument --discover: {exc}")
    modules = tuple(m.strip() for m in args.lora_target_modules.split(",") if m.strip())
    return TrainerOptions(
        model=args.model,
        dataset=args.dataset,
        output_dir=args.output_dir.resolve() if here else args.output_dir,
        topology=Topology(
            sidecar_replicas=replicas,
            sidecar_discover=args.sidecar_discover,
            sidecar_host=args.sidecar_host,
            sidecar_port=args.sidecar_port,
            replica_token_env=args.replica_token_env,
            proxy_url=args.proxy_url,
            proxy_token_env=args.proxy_token_env,
            proxy_args=tuple(args.proxy_arg),
            fleet_key_env=args.fleet_key_env,
            run_weight=args.run_weight,
        ),
        # The flags of these sections are named as their fields (argparse's dest).
        world=_section(World, args, num_processes=args.num_processes or 0),  # 0: count GPUs
        checkpoints=_section(Checkpoints, args),
        recipe=_section(Recipe, args, lora_target_modules=modules, machine_sized=machine_sized),
        dataset_config=args.dataset_config,
        dataset_split=args.dataset_split,
        prompt_column=args.prompt_column,
        answer_column=args.answer_column,
        system_prompt=args.system_prompt,
        format_instruction=instruction_for(rewards, args.format_instruction),
        rewards=rewards,
        response_template=args.response_template,
        max_steps=args.max_steps,
        seed=args.seed,
        report_to=args.report_to,
        server_timeout_s=args.server_timeout,
        adapters_local=args.adapters_local,
        adapters_in_bucket=args.adapters_in_bucket,
    )
