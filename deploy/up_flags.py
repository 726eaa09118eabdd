"""The flags of ``deploy up`` (and of ``rehearse``, which takes the same, and ``fleet up``,
which takes those that describe replicas and a proxy job): defined, checked (argparse's exit 2,
naming the flag), and read into the ``RunPlan`` they describe.

Durations are read by ``proxy.config.units`` (``30m``, ``90s``, plain seconds; a bare number
under 60 is refused as a job's lifetime: ``--timeout 6`` meant hours); a flavor is one of
huggingface_hub's ``JobHardware``, so a typo stops here with the list rather than at the Hub.
A count of replica jobs is ``--replica-count``; ``--replicas``, its name before ``--replica-urls``
became every program's list of replica URLs, is deprecated (``proxy.config.deprecated``).
``--replica-count MIN..MAX`` turns the scaler on, with its own flags (``deploy.scale_flags``).
"""

from __future__ import annotations

import argparse
import re
import shlex
import time
from collections.abc import Sequence
from dataclasses import replace

from huggingface_hub import JobHardware

from deploy.clock import Clock
from deploy.durations import whole_seconds
from deploy.install import default_source, install_for
from deploy.plan import Flavors, Images, RunPlan
from deploy.scale_flags import ReplicaCountArg, add_scale_flags, check_scale_args, scaling_of
from proxy.config.deprecated import DeprecatedNames
from proxy.config.units import LIFETIME, DurationArg

# HF Jobs' flavors as huggingface_hub knows them (`hf jobs hardware` lists the live ones).
FLAVORS = tuple(flavor.value for flavor in JobHardware)

RUN_NAME = re.compile(r"^[a-z0-9]([a-z0-9-]{0,38}[a-z0-9])?$")
ALIAS_MAX = 34  # HF Jobs' network aliases; a run on a fleet claims ``<run>-trainer``
FLEET_RUN_MAX = ALIAS_MAX - len("-trainer")
FLEET_MAX_LORAS = 12  # a fleet's replicas: e.g. 4 runs at max_staleness 1 (a share of 3 each)
FLEET_MAX_LORA_RANK = 16
BUCKET = re.compile(r"^[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*$")
# ``--replicas``: the count's earlier name, a list of URLs in the other programs.
REPLICAS_DEPRECATED = {"--replicas": "--replicas is a list of replica URLs in rollout-proxy"}


def add_up_flags(up: argparse.ArgumentParser, *, fleet: bool = False) -> None:
    """``deploy up``'s flags; ``fleet``: ``deploy fleet up``'s (no trainer, no topology)."""
    add = up.add_argument
    add("--bucket", required=True, help="NS/BUCKET holding the code and the adapters")
    add("--model", required=True, help="the base model every replica serves")
    if fleet:
        _fleet_up_flags(up)
    else:
        add(
            "--replica-count",
            "--replicas",
            action=DeprecatedNames,
            deprecated=REPLICAS_DEPRECATED,
            dest="replicas",
            type=ReplicaCountArg(),
            metavar="N|MIN..MAX",
            help="number of vLLM replica jobs (required, but with --fleet); MIN..MAX: the run "
            "starts with MIN and the scaler in the trainer job adds and retires replica jobs "
            'within the range as the run needs (docs/deploy.md, "The fleet sizes itself")',
        )
        add(
            "--topology",
            choices=["sidecar", "job"],
            default=None,
            help="sidecar: the proxy runs beside the trainer, in its job; job: in a job of its "
            "own (default: sidecar)",
        )
        add(
            "--fleet",
            default=None,
            help="put this run on a shared fleet (`deploy fleet up`): only its trainer is "
            "launched, in the fleet's network, at the fleet proxy's /runs/<run-name> (default: "
            "none, a fleet of the run's own)",
        )
        add("--run-weight", type=float, default=1.0, help="with --fleet: the run's weight there")
        add_scale_flags(up)
    add(
        "--network",
        choices=["private", "public"],
        default=RunPlan.network,
        help="private: the run's jobs share a network group and talk plain HTTP inside it, with "
        "a key made for the run; public: every hop crosses HF's edge with your HF token "
        "(default: %(default)s)",
    )
    if not fleet:
        add("--run-name", help="lowercase letters, digits, dashes (default: rollout-<time>)")
    roles = [
        ("replica", "each replica job's hardware"),
        ("trainer", "trainer_entry starts one FSDP2 rank per GPU"),
        ("proxy", "the proxy job's (topology job only)"),
    ]
    for role, help_text in roles if not fleet else [roles[0], roles[2]]:
        add(
            f"--{role}-flavor",
            default=getattr(Flavors, role),
            choices=FLAVORS,
            metavar="FLAVOR",
            help=help_text,
        )
    add("--replica-image", default=Images.replica, help="the replicas' Docker image")
    if not fleet:
        add("--trainer-image", default=Images.trainer, help="the trainer's (it needs vLLM too)")
    add("--proxy-image", default=Images.proxy, help="the proxy job's (topology job)")
    add(
        "--code",
        choices=["wheel", "pypi", "image"],
        help="how jobs get the project (default: wheel, built from the source checkout or the "
        "installed package; pypi: a version published on PyPI; image: in the images)",
    )
    add("--replica-args", default="", help="extra replica_entry flags, one quoted string")
    add("--mount-path", default="/lora", help="where every job mounts the bucket")
    add(
        "--no-adapter-push",
        dest="adapter_push",
        action="store_false",
        help="replicas without the adapter receiver, proxies that do not push: every sync waits "
        "for the replicas' bucket mounts",
    )
    add(
        "--allow-public-bucket",
        action="store_true",
        help="use an existing public bucket (the wheel and the adapters become public)",
    )
    add(
        "--timeout",
        type=DurationArg(bare=LIFETIME, positive=True),
        default="6h",
        help="the trainer's lifetime (90m, 6h; a plain number: seconds); jobs launched before "
        "it get the start-up waits (--ready-timeout per wave) on top",
    )
    add(
        "--ready-timeout",
        type=DurationArg(positive=True),
        default="30m",
        help="the wait for each wave of jobs",
    )
    add("--poll-interval", type=DurationArg(positive=True), default="5s", help="between polls")
    if not fleet:
        add(
            "--trainer-nodes",
            type=int,
            default=RunPlan.trainer_nodes,
            help="trainer jobs, each with every GPU of --trainer-flavor; they meet at node 0's "
            "network alias (private network only; default: %(default)s)",
        )
    add(
        "--attempts",
        type=int,
        default=RunPlan.attempts,
        help="runs in all HF Jobs gives each job that fails (1: no retry; default: %(default)s)",
    )
    add("--keep", action="store_true", help="on failure, leave launched jobs running")
    add(
        "--dry-run",
        action="store_true",
        help="print the job specs as JSON and what they cost (per hour, at most), launch nothing",
    )


def fleet_lora_args(max_loras: int, max_lora_rank: int) -> tuple[str, ...]:
    """A fleet's replica flags: room for every run's adapters, and their ranks."""
    return ("--max-loras", str(max_loras), "--max-lora-rank", str(max_lora_rank))


def _fleet_up_flags(up: argparse.ArgumentParser) -> None:
    add = up.add_argument
    add("--fleet", required=True, help="the fleet's name: lowercase letters, digits, dashes")
    add(
        "--replica-count",
        "--replicas",
        action=DeprecatedNames,
        deprecated=REPLICAS_DEPRECATED,
        dest="replicas",
        type=ReplicaCountArg(),
        metavar="N",
        required=True,
        help="number of vLLM replica jobs",
    )
    add(
        "--max-loras",
        type=int,
        default=FLEET_MAX_LORAS,
        help="adapters each replica holds at once, shared by the runs by weight (a run needs "
        "its TRL max_staleness + 2)",
    )
    add(
        "--max-lora-rank",
        type=int,
        default=FLEET_MAX_LORA_RANK,
        help="the largest --lora-rank a run on the fleet may train",
    )


def plan_from_args(args: argparse.Namespace, trainer_args: Sequence[str], clock: Clock) -> RunPlan:
    """The plan the flags describe: a run (``deploy up``, on a fleet of its own or ``--fleet``)
    or a fleet (``deploy fleet up``: ``args.shared``)."""
    shared = getattr(args, "shared", False)
    if shared:
        run_name = args.fleet
    else:
        run_name = args.run_name or time.strftime(
            "rollout-%Y%m%d-%H%M%S", time.gmtime(clock.wall())
        )
    source = args.code or default_source()
    lora = fleet_lora_args(args.max_loras, args.max_lora_rank) if shared else ()
    trainer_image = getattr(args, "trainer_image", Images.trainer)
    trainer_flavor = getattr(args, "trainer_flavor", Flavors.trainer)
    return RunPlan(
        run_name=run_name,
        bucket=args.bucket,
        model=args.model,
        replicas=args.replicas.low if args.replicas is not None else 0,
        install=install_for(source, f"{args.mount_path}/{run_name}/code"),
        namespace=args.namespace or args.bucket.split("/")[0],
        topology="job" if shared or args.fleet else (args.topology or "sidecar"),
        images=Images(args.replica_image, trainer_image, args.proxy_image),
        flavors=Flavors(args.replica_flavor, trainer_flavor, args.proxy_flavor),
        timeout_s=whole_seconds(args.timeout),
        ready_timeout_s=args.ready_timeout,
        mount_path=args.mount_path.rstrip("/"),
        replica_args=(*lora, *shlex.split(args.replica_args)),
        trainer_args=tuple(trainer_args),
        adapter_push=args.adapter_push,
        attempts=args.attempts,
        network=args.network,
        trainer_nodes=getattr(args, "trainer_nodes", 1),
        shared=shared,
        fleet=None if shared else args.fleet,
        run_weight=getattr(args, "run_weight", 1.0),
        scale=scaling_of(args),
    )


def check_up_args(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Reject bad values with argparse's exit 2, naming the flag, the value and the rule."""
    if not BUCKET.match(args.bucket):
        parser.error(f"argument --bucket: must look like NAMESPACE/BUCKET (got {args.bucket!r})")
    if args.attempts < 1:
        parser.error(f"argument --attempts: must be at least 1 (got {args.attempts})")
    if getattr(args, "shared", False) or args.fleet is not None:
        _check_fleet_args(parser, args)
    elif args.replicas is None:
        parser.error(
            "argument --replica-count: required (but with --fleet, whose replicas it uses)"
        )
    if args.replicas is not None and not args.replicas.ranged and args.replicas.low < 1:
        parser.error(f"argument --replica-count: must be at least 1 (got {args.replicas})")
    check_scale_args(parser, args)
    if getattr(args, "trainer_nodes", 1) < 1:
        parser.error(f"argument --trainer-nodes: must be at least 1 (got {args.trainer_nodes})")
    if getattr(args, "trainer_nodes", 1) > 1 and args.network == "public":
        parser.error(
            "argument --trainer-nodes: several trainer nodes meet on the run's private network "
            "only (HF's edge exposes one port, not torch's rendezvous): drop --network public"
        )
    if getattr(args, "run_name", None) is not None and not RUN_NAME.match(args.run_name):
        parser.error(
            f"argument --run-name: 1-40 lowercase letters, digits or dashes, not starting or "
            f"ending with a dash (got {args.run_name!r})"
        )
    if not args.mount_path.startswith("/"):
        parser.error(f"argument --mount-path: must be absolute (got {args.mount_path!r})")


def _check_fleet_args(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """A fleet (``fleet up``) or a run on one (``up --fleet``)."""
    if not RUN_NAME.match(args.fleet):
        parser.error(
            f"argument --fleet: 1-40 lowercase letters, digits or dashes, not starting or "
            f"ending with a dash (got {args.fleet!r})"
        )
    if args.network == "public":
        parser.error(
            "argument --network: a shared fleet's runs reach its proxy on the fleet's private "
            "network (HF's edge takes your token in the one Authorization header its admin key "
            "needs): drop --network public"
        )
    if getattr(args, "shared", False):
        if args.max_loras < 2:
            parser.error(f"argument --max-loras: at least 2 (got {args.max_loras})")
        return
    if args.command == "rehearse":  # the fleet is rehearsed with the run
        if args.replicas is None:
            parser.error("argument --replica-count: required: the fleet's, rehearsed with the run")
    elif args.replicas is not None:
        parser.error(
            "argument --replica-count: not with --fleet (the run uses the fleet's replicas)"
        )
    if args.topology is not None:
        parser.error("argument --topology: not with --fleet (the fleet's proxy job serves it)")
    if args.run_name is not None and len(args.run_name) > FLEET_RUN_MAX:
        parser.error(
            f"argument --run-name: at most {FLEET_RUN_MAX} characters on a fleet (its trainer "
            f"claims the network alias <run>-trainer, at most {ALIAS_MAX}; got {args.run_name!r})"
        )
    if not 0 < args.run_weight <= 1000:
        parser.error(f"argument --run-weight: above 0, at most 1000 (got {args.run_weight:g})")


def fleet_of(plan: RunPlan) -> RunPlan:
    """The fleet a run on one (``plan.fleet``) joins, as ``fleet up`` with ``plan``'s flags and
    the fleet defaults would plan it (``rehearse --fleet`` runs both)."""
    assert plan.fleet is not None
    lora = fleet_lora_args(FLEET_MAX_LORAS, FLEET_MAX_LORA_RANK)
    return replace(
        plan,
        run_name=plan.fleet,
        install=install_for(plan.install.source, f"{plan.mount_path}/{plan.fleet}/code"),
        shared=True,
        fleet=None,
        trainer_args=(),
        replica_args=(*lora, *plan.replica_args),
    )
