"""The trainer's command line: flags -> ``TrainerOptions``, with nothing heavy imported.

Every recipe value is a flag whose default is the fastest published run (``trainer_entry.recipe``);
``--help`` shows each default. A bad value exits 2 naming its flag (argparse's ``error``); the
values are checked together and frozen into ``TrainerOptions`` by ``freeze.options_from_args``.
``deploy`` checks a plan's trainer arguments with this same parser before launching anything.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from proxy.config.programs import DefaultsFormatter, OneLineParser, version_flag
from proxy.config.units import DurationArg
from trainer_entry.options import Checkpoints
from trainer_entry.prompts import AUTO
from trainer_entry.recipe import CPU_SIZES, Recipe
from trainer_entry.rewards import REWARD_NAMES
from trainer_entry.templates import FAMILIES

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
        "--probe-reference",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="each adapter version carries the served-policy probe's reference (a forward of the "
        "probe's few prefixes per save), so the proxy checks every replica against what the "
        "trainer trained; off: it judges replicas by comparing them, as for plain TRL",
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
