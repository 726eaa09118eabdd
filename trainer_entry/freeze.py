"""The trainer's parsed flags, checked and frozen into ``TrainerOptions`` (``options_from_args``):
a bad value, or two flags that do not go together, exits 2 naming the flag (argparse's
``error``). Nothing heavy is imported: ``deploy`` checks a plan's trainer arguments here before
launching anything (``here=False``: the job's directories are not on this machine).
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping
from dataclasses import fields
from pathlib import Path
from typing import Any, TypeVar

from trainer_entry.inputs import BadInput, first_prompt
from trainer_entry.options import Checkpoints, Topology, TrainerOptions, World
from trainer_entry.prompts import AUTO, asked_shape, default_rewards, instruction_for
from trainer_entry.recipe import CPU_SIZES, Recipe
from trainer_entry.rewards import REWARD_NAMES, is_custom

T = TypeVar("T")


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
        # The flags of these sections are named as their fields (argparse's dest).
        topology=_section(
            Topology, args, sidecar_replicas=replicas, proxy_args=tuple(args.proxy_arg)
        ),
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
        probe_reference=args.probe_reference,
        server_timeout_s=args.server_timeout,
        adapters_local=args.adapters_local,
        adapters_in_bucket=args.adapters_in_bucket,
    )
