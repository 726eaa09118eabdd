"""``rollout-trainer`` / ``python -m trainer_entry``: TRL's AsyncGRPOTrainer with a LoRA, pointed
at the proxy.

Topologies (exactly one):

- ``--sidecar-replicas URL[,URL...]``: start the proxy beside the trainer in front of the
  replicas, watching ``<output_dir>/.vllm_lora`` (the bucket mount the replicas read) for new
  versions; it sends ``Authorization: Bearer $HF_TOKEN`` to the replicas (``--replica-token-env``
  names another variable), as HF Jobs' exposed ports demand; ``--sidecar-host 0.0.0.0
  --sidecar-port 8000`` makes it reachable from outside the job (``deploy`` exposes that port to
  watch it), TRL still talks to it on 127.0.0.1;
- ``--proxy-url URL [--proxy-token-env VAR]``: use a proxy elsewhere, always through a local
  relay (the proxy with one upstream): it pushes each adapter version TRL saves into the remote
  proxy's receiver before it forwards TRL's load (the remote proxy then pushes on to the
  replicas, needing no mount), and with a token variable it adds ``Authorization: Bearer $VAR``
  for TRL, which cannot send one.

Parsing needs none of the heavy packages; torch, TRL and PEFT are imported only to train.
Exit codes: 0 when training finished, 2 for a bad flag (the message names it).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from trainer_entry import sidecar
from trainer_entry.options import Topology, TrainerOptions
from trainer_entry.rewards import REWARDS

log = logging.getLogger("trainer_entry")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="rollout-trainer", description=__doc__.split("\n\n")[0])
    add = parser.add_argument
    add("--model", required=True, help="Hub id or local directory of the base model")
    add("--dataset", required=True, help="Hub dataset id, or a local .jsonl/.json/.parquet file")
    add("--dataset-config", default=None)
    add("--dataset-split", default="train")
    add("--prompt-column", default="prompt", help="messages, or text wrapped as a user turn")
    add("--answer-column", default="answer", help="reference answers for the math reward")
    add("--system-prompt", default=None, help="system turn added to text prompts")
    add("--rewards", default="math,format", help=f"comma-separated, from {sorted(REWARDS)}")
    add("--output-dir", type=Path, required=True, help="checkpoints and .vllm_lora (bucket mount)")
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--sidecar-replicas", default=None, help="replica URLs, comma-separated")
    where.add_argument("--proxy-url", default=None, help="a proxy running elsewhere")
    add("--proxy-token-env", default=None, help="variable holding the remote proxy's token")
    add(
        "--replica-token-env",
        default="HF_TOKEN",
        help="sidecar: variable holding the bearer token the replicas demand (default: HF_TOKEN)",
    )
    add("--sidecar-host", default="127.0.0.1", help="sidecar: where the proxy listens")
    add("--sidecar-port", type=int, default=0, help="sidecar: its port (default: a free one)")
    add("--proxy-arg", action="append", default=[], help="passed to the local proxy (repeatable)")
    add("--lora-rank", type=int, default=1)
    add("--lora-alpha", type=int, default=None, help="default: 2 x rank")
    add("--lora-target-modules", default=",".join(TrainerOptions.lora_target_modules))
    add("--max-steps", type=int, default=100)
    add("--num-generations", type=int, default=8, help="rollouts per prompt (GRPO group)")
    add("--batch-size", type=int, default=None, help="samples per step (default: a group)")
    add("--max-completion-length", type=int, default=256)
    add("--learning-rate", type=float, default=1e-5)
    add("--temperature", type=float, default=1.0)
    add("--max-staleness", type=int, default=4)
    add("--weight-sync-steps", type=int, default=1)
    add("--max-inflight-tasks", type=int, default=-1, help="-1: TRL's automatic value")
    add("--token-budget", type=int, default=None, help="default: the server's max_model_len")
    add("--gradient-checkpointing", action=argparse.BooleanOptionalAction, default=True)
    add("--save-steps", type=int, default=0, help="checkpoint every N steps (0: never)")
    add("--resume", nargs="?", const="latest", default=None, help="checkpoint dir, or latest")
    add("--seed", type=int, default=0)
    add(
        "--report-to",
        default="none",
        help="TRL's trackers (wandb, tensorboard, trackio, ...): the proxy's figures go there too",
    )
    add("--server-timeout", type=float, default=240.0, help="seconds to wait for /health")
    return parser


def options_from_args(args: argparse.Namespace, parser: argparse.ArgumentParser) -> TrainerOptions:
    """Validate and freeze; a bad value exits 2 naming its flag."""
    rewards = tuple(name.strip() for name in args.rewards.split(",") if name.strip())
    unknown = sorted(set(rewards) - set(REWARDS))
    if not rewards or unknown:
        parser.error(f"argument --rewards: choose from {sorted(REWARDS)} (got {args.rewards!r})")
    positive = ("lora_rank", "max_steps", "num_generations", "weight_sync_steps")
    for name in positive:
        if getattr(args, name) < 1:
            parser.error(f"argument --{name.replace('_', '-')}: must be >= 1")
    if args.max_staleness < 0:
        parser.error("argument --max-staleness: must be >= 0")
    if args.proxy_token_env is not None:
        if args.proxy_url is None:
            parser.error("argument --proxy-token-env: only with --proxy-url")
        if not os.environ.get(args.proxy_token_env):
            parser.error(f"argument --proxy-token-env: ${args.proxy_token_env} is not set")
    replicas = tuple(u.strip() for u in (args.sidecar_replicas or "").split(",") if u.strip())
    if args.sidecar_replicas is not None and not replicas:
        parser.error("argument --sidecar-replicas: give at least one URL")
    if not 0 <= args.sidecar_port <= 65535:
        parser.error(f"argument --sidecar-port: 0 to 65535 (got {args.sidecar_port})")
    topology = Topology(
        sidecar_replicas=replicas,
        sidecar_host=args.sidecar_host,
        sidecar_port=args.sidecar_port,
        replica_token_env=args.replica_token_env,
        proxy_url=args.proxy_url,
        proxy_token_env=args.proxy_token_env,
        proxy_args=tuple(args.proxy_arg),
    )
    modules = tuple(m.strip() for m in args.lora_target_modules.split(",") if m.strip())
    return TrainerOptions(
        model=args.model,
        dataset=args.dataset,
        output_dir=args.output_dir.resolve(),
        topology=topology,
        dataset_config=args.dataset_config,
        dataset_split=args.dataset_split,
        prompt_column=args.prompt_column,
        answer_column=args.answer_column,
        system_prompt=args.system_prompt,
        rewards=rewards,
        lora_rank=args.lora_rank,
        lora_alpha=args.lora_alpha,
        lora_target_modules=modules,
        max_steps=args.max_steps,
        num_generations=args.num_generations,
        batch_size=args.batch_size,
        max_completion_length=args.max_completion_length,
        learning_rate=args.learning_rate,
        temperature=args.temperature,
        max_staleness=args.max_staleness,
        weight_sync_steps=args.weight_sync_steps,
        max_inflight_tasks=args.max_inflight_tasks,
        token_budget=args.token_budget,
        gradient_checkpointing=args.gradient_checkpointing,
        save_steps=args.save_steps,
        resume=args.resume,
        seed=args.seed,
        report_to=args.report_to,
        server_timeout_s=args.server_timeout,
    )


@contextmanager
def proxy_for(options: TrainerOptions) -> Iterator[str]:
    """The base URL TRL should use, with whatever local proxy that needs running meanwhile."""
    topology = options.topology
    if topology.sidecar_replicas:
        adapters = options.output_dir / ".vllm_lora"
        adapters.mkdir(parents=True, exist_ok=True)
        port = topology.sidecar_port or sidecar.free_port()
        argv = sidecar.sidecar_command(
            topology.sidecar_replicas, port, adapters, topology.proxy_args, topology.sidecar_host
        )
        env = sidecar.upstream_token_env(os.environ, topology.replica_token_env)
        log.info("starting the sidecar proxy for %s", ", ".join(topology.sidecar_replicas))
        with sidecar.running(argv, env=env) as url:
            yield sidecar.local_url(url)
        return
    assert topology.proxy_url is not None
    argv = sidecar.relay_command(topology.proxy_url, sidecar.free_port(), topology.proxy_args)
    if topology.proxy_token_env is None:
        log.info("starting a local relay to %s (pushes adapters; no token)", topology.proxy_url)
        with sidecar.running(argv) as url:
            yield url
        return
    token = os.environ[topology.proxy_token_env]
    log.info("starting a local relay to %s (pushes adapters; bearer token from $%s)",
             topology.proxy_url, topology.proxy_token_env)  # fmt: skip
    with sidecar.running(argv, env={"PROXY_UPSTREAM_TOKEN": token}) as url:
        yield url


def figures_source(options: TrainerOptions) -> tuple[str | None, str | None]:
    """Where the proxy's figures come from: the remote proxy (and its token) behind the local
    relay, whose own view is one upstream; (None, None): the proxy TRL talks to."""
    topology = options.topology
    if topology.proxy_url is None:
        return None, None
    env = topology.proxy_token_env
    return topology.proxy_url, os.environ.get(env) if env is not None else None


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    options = options_from_args(parser.parse_args(argv), parser)
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    options.output_dir.mkdir(parents=True, exist_ok=True)
    with proxy_for(options) as url:
        from trainer_entry.train import run

        log.info("TRL talks to %s", url)
        metrics = run(options, url, figures_source(options))
    print(f"training finished: {metrics}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
