"""The flags of ``deploy up`` (and of ``rehearse``, which takes the same): defined, checked
(argparse's exit 2, naming the flag), and read into the ``RunPlan`` they describe.

Durations are ``replica_entry.helpformat.duration``'s (``30m``, ``90s``, plain seconds); a
flavor is one of huggingface_hub's ``JobHardware``, so a typo stops here with the list rather than
at the Hub.
"""

from __future__ import annotations

import argparse
import re
import shlex
import time
from collections.abc import Sequence

from huggingface_hub import JobHardware

from deploy.clock import Clock
from deploy.durations import whole_seconds
from deploy.install import default_source, install_for
from deploy.plan import Flavors, Images, RunPlan
from replica_entry.helpformat import duration

# HF Jobs' flavors as huggingface_hub knows them (`hf jobs hardware` lists the live ones).
FLAVORS = tuple(flavor.value for flavor in JobHardware)

RUN_NAME = re.compile(r"^[a-z0-9]([a-z0-9-]{0,38}[a-z0-9])?$")
BUCKET = re.compile(r"^[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*$")


def add_up_flags(up: argparse.ArgumentParser) -> None:
    add = up.add_argument
    add("--bucket", required=True, help="NS/BUCKET holding the code and the adapters")
    add("--model", required=True, help="the base model every replica serves")
    add("--replicas", type=int, required=True, help="number of vLLM replica jobs")
    add(
        "--topology",
        choices=["sidecar", "job"],
        default="sidecar",
        help="sidecar: the proxy runs beside the trainer, in its job; job: in a job of its own",
    )
    add(
        "--network",
        choices=["private", "public"],
        default=RunPlan.network,
        help="private: the run's jobs share a network group and talk plain HTTP inside it, with "
        "a key made for the run; public: every hop crosses HF's edge with your HF token "
        "(default: %(default)s)",
    )
    add("--run-name", help="lowercase letters, digits, dashes (default: rollout-<time>)")
    for role, help_text in (
        ("replica", "each replica job's hardware"),
        ("trainer", "trainer_entry starts one FSDP2 rank per GPU"),
        ("proxy", "the proxy job's (topology job only)"),
    ):
        add(
            f"--{role}-flavor",
            default=getattr(Flavors, role),
            choices=FLAVORS,
            metavar="FLAVOR",
            help=help_text,
        )
    add("--replica-image", default=Images.replica, help="the replicas' Docker image")
    add("--trainer-image", default=Images.trainer, help="the trainer's (it needs vLLM too)")
    add("--proxy-image", default=Images.proxy, help="the proxy job's (topology job)")
    add(
        "--code",
        choices=["wheel", "pypi", "image"],
        help="how jobs get the project (default: wheel from a source checkout, else pypi)",
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
        type=duration,
        default="6h",
        help="the trainer's lifetime (90m, 6h; a plain number: seconds); jobs launched before "
        "it get the start-up waits (--ready-timeout per wave) on top",
    )
    add("--ready-timeout", type=duration, default="30m", help="the wait for each wave of jobs")
    add("--poll-interval", type=duration, default="5s", help="between status polls")
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
    add("--dry-run", action="store_true", help="print the job specs as JSON, launch nothing")


def plan_from_args(args: argparse.Namespace, trainer_args: Sequence[str], clock: Clock) -> RunPlan:
    run_name = args.run_name or time.strftime("rollout-%Y%m%d-%H%M%S", time.gmtime(clock.wall()))
    source = args.code or default_source()
    return RunPlan(
        run_name=run_name,
        bucket=args.bucket,
        model=args.model,
        replicas=args.replicas,
        install=install_for(source, f"{args.mount_path}/{run_name}/code"),
        namespace=args.namespace or args.bucket.split("/")[0],
        topology=args.topology,
        images=Images(args.replica_image, args.trainer_image, args.proxy_image),
        flavors=Flavors(args.replica_flavor, args.trainer_flavor, args.proxy_flavor),
        timeout_s=whole_seconds(args.timeout),
        ready_timeout_s=args.ready_timeout,
        mount_path=args.mount_path.rstrip("/"),
        replica_args=tuple(shlex.split(args.replica_args)),
        trainer_args=tuple(trainer_args),
        adapter_push=args.adapter_push,
        attempts=args.attempts,
        network=args.network,
        trainer_nodes=args.trainer_nodes,
    )


def check_up_args(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Reject bad values with argparse's exit 2, naming the flag, the value and the rule."""
    if not BUCKET.match(args.bucket):
        parser.error(f"argument --bucket: must look like NAMESPACE/BUCKET (got {args.bucket!r})")
    if args.attempts < 1:
        parser.error(f"argument --attempts: must be at least 1 (got {args.attempts})")
    if args.replicas < 1:
        parser.error(f"argument --replicas: must be at least 1 (got {args.replicas})")
    if args.trainer_nodes < 1:
        parser.error(f"argument --trainer-nodes: must be at least 1 (got {args.trainer_nodes})")
    if args.trainer_nodes > 1 and args.network == "public":
        parser.error(
            "argument --trainer-nodes: several trainer nodes meet on the run's private network "
            "only (HF's edge exposes one port, not torch's rendezvous): drop --network public"
        )
    if args.run_name is not None and not RUN_NAME.match(args.run_name):
        parser.error(
            f"argument --run-name: 1-40 lowercase letters, digits or dashes, not starting or "
            f"ending with a dash (got {args.run_name!r})"
        )
    if not args.mount_path.startswith("/"):
        parser.error(f"argument --mount-path: must be absolute (got {args.mount_path!r})")
