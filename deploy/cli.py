"""Command line: ``python -m deploy up|rehearse|status|logs|down`` (also ``rollout-deploy``).

``up`` takes the trainer's own flags after ``--``. Every command talks to the Hub through
``HfApi(endpoint=--hub-endpoint or $HF_ENDPOINT, token=<your HF token>)``; ``up --dry-run``
prints the job specs as JSON and needs neither a token nor the network.

Exit codes: 0 done, 1 a failure explained on stderr (with what to do next), 2 bad flags (ours,
or a job's: ``up`` reads every job's flags with its entry point's parser first), 130 interrupted.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from huggingface_hub import HfApi, get_token

from deploy import health, hints, preflight
from deploy.clock import Clock, SystemClock
from deploy.durations import parse_duration
from deploy.errors import DeployError
from deploy.install import default_source, install_for, project_version, source_root
from deploy.jobs import HUB_ERRORS, HubJobs
from deploy.launch import Launch, summary
from deploy.logs import print_logs
from deploy.plan import Flavors, Images, RunPlan, dry_run_specs
from deploy.preflight import BadFlags
from deploy.rehearsal.run import Rehearsal, host_refusal
from deploy.specs import ROLES
from deploy.status import report
from deploy.teardown import down
from deploy.wheel import Builder, build_wheel, publish_wheel

RUN_NAME = re.compile(r"^[a-z0-9]([a-z0-9-]{0,38}[a-z0-9])?$")
BUCKET = re.compile(r"^[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*$")


def publish_code(
    jobs: HubJobs, plan: RunPlan, say: Callable[[str], None], build: Builder = build_wheel
) -> None:
    """Build the wheel and upload it into the run's folder of the bucket (``--code wheel``)."""
    root = source_root()
    if plan.install.source != "wheel" or root is None:
        say(f"code: {plan.install.requirement or 'already in the images'}")
        return
    say(f"building the wheel of {root} and uploading it to {plan.bucket}/{plan.code_dir}")
    destination = publish_wheel(
        jobs, plan.bucket, root, project_version("wheel"), plan.code_dir, build=build
    )
    say(f"uploaded hf://buckets/{plan.bucket}/{destination}")


Publisher = Callable[[HubJobs, RunPlan, Callable[[str], None], Builder], None]


@dataclass
class Runtime:
    """What the commands need from the outside world; tests swap parts of it."""

    clock: Clock = field(default_factory=SystemClock)
    probe: health.Prober = health.get
    token: Callable[[], str | None] = get_token
    publish: Publisher = publish_code
    build: Builder = build_wheel
    out: TextIO = field(default_factory=lambda: sys.stdout)
    err: TextIO = field(default_factory=lambda: sys.stderr)

    def say(self, line: str) -> None:
        print(line, file=self.out, flush=True)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m deploy",
        description="Deploy a rollout fleet (vLLM replicas, proxy, trainer) on Hugging Face Jobs.",
    )
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--hub-endpoint",
        default=os.environ.get("HF_ENDPOINT"),
        help="Hub API base URL (default: $HF_ENDPOINT or https://huggingface.co)",
    )
    common.add_argument("--namespace", help="where the jobs run (up: the bucket's namespace)")
    commands = parser.add_subparsers(dest="command", required=True)
    _add_up(
        commands.add_parser("up", parents=[common], help="launch a run (trainer flags after --)")
    )
    rehearse = commands.add_parser(
        "rehearse",
        parents=[common],
        help="run the jobs `up` would launch on this machine first (root, Linux): images, "
        "install steps, flags, network and mounts as planned, a tiny model, a few steps",
    )
    _add_up(rehearse)
    add = rehearse.add_argument
    add("--steps", type=int, default=2, help="training steps the trainer must finish")
    add(
        "--image-base",
        type=Path,
        default=None,
        help="the Python of an environment holding vLLM, torch (the vLLM image's packages; "
        "default: the checkout's .venv-e2e, from `make e2e-venv`)",
    )
    add(
        "--workdir",
        type=Path,
        default=None,
        help="where the jobs' environments, logs and the bucket go (not under /tmp; default: "
        "a new folder in /var/tmp)",
    )
    add("--train-timeout", type=float, default=900.0, help="seconds the trainer may take")
    for name, text in (
        ("status", "stage and health of every job of a run, and the proxy's figures"),
        ("logs", "the logs of a run's jobs"),
        ("down", "cancel every job of a run"),
    ):
        sub = commands.add_parser(name, parents=[common], help=text)
        sub.add_argument("--run-name", required=True)
        if name == "logs":
            sub.add_argument("--role", choices=ROLES, help="only this role's jobs")
            sub.add_argument("--job", help="only this job id")
            sub.add_argument("--follow", action="store_true", help="stream until the jobs end")
            sub.add_argument("--tail", type=int, help="only the last N lines of each job")
    return parser


def _add_up(up: argparse.ArgumentParser) -> None:
    add = up.add_argument
    add("--bucket", required=True, help="NS/BUCKET holding the code and the adapters")
    add("--model", required=True, help="the base model every replica serves")
    add("--replicas", type=int, required=True, help="number of vLLM replica jobs")
    add("--topology", choices=["sidecar", "job"], default="sidecar")
    add(
        "--network",
        choices=["private", "public"],
        default=RunPlan.network,
        help="private: the run's jobs share a network group and talk plain HTTP inside it, with "
        "a key made for the run; public: every hop crosses HF's edge with your HF token "
        "(default: %(default)s)",
    )
    add("--run-name", help="lowercase letters, digits, dashes (default: rollout-<time>)")
    add("--replica-flavor", default=Flavors.replica)
    add(
        "--trainer-flavor",
        default=Flavors.trainer,
        help="trainer_entry starts one FSDP2 rank per GPU (default: %(default)s)",
    )
    add("--proxy-flavor", default=Flavors.proxy, help="topology job only")
    add("--replica-image", default=Images.replica)
    add("--trainer-image", default=Images.trainer)
    add("--proxy-image", default=Images.proxy)
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
        default="6h",
        help="the trainer's lifetime, with a unit s, m, h or d (e.g. 90m, 6h); jobs launched "
        "before it get the start-up waits (--ready-timeout per wave) on top",
    )
    add("--ready-timeout", type=float, default=1800.0, help="seconds to wait for each wave")
    add("--poll-interval", type=float, default=5.0, help="seconds between status polls")
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
        timeout_s=parse_duration(args.timeout),
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
    for flag in ("ready_timeout", "poll_interval"):
        if getattr(args, flag) <= 0:
            parser.error(f"argument --{flag.replace('_', '-')}: must be positive")
    try:
        parse_duration(args.timeout)
    except ValueError as exc:
        parser.error(str(exc))


def _token(runtime: Runtime) -> str:
    token = runtime.token()
    if not token:
        raise DeployError(
            "no HF token found: run `hf auth login` (a token with write access to the jobs' "
            "namespace) or set HF_TOKEN"
        )
    return token


def _hub(args: argparse.Namespace, token: str, namespace: str | None = None) -> HubJobs:
    """The Hub client for ``namespace`` (default: --namespace, else the token's user)."""
    api = HfApi(endpoint=args.hub_endpoint, token=token)
    return HubJobs(api, namespace or args.namespace or api.whoami()["name"])


def run_up(args: argparse.Namespace, trainer_args: Sequence[str], runtime: Runtime) -> int:
    # Every job's flags read by its own entry point before anything is launched or printed.
    plan = preflight.checked(plan_from_args(args, trainer_args, runtime.clock))
    if args.dry_run:
        specs = [spec.describe(plan.namespace) for spec in dry_run_specs(plan)]
        print(json.dumps(specs, indent=2), file=runtime.out)
        return 0
    token = _token(runtime)
    jobs = _hub(args, token, plan.namespace)
    launch = Launch(
        jobs=jobs,
        plan=plan,
        token=token,
        probe=runtime.probe,
        clock=runtime.clock,
        say=runtime.say,
        publish=lambda: runtime.publish(jobs, plan, runtime.say, runtime.build),
        ready_timeout_s=args.ready_timeout,
        poll_s=args.poll_interval,
        keep=args.keep,
        endpoint=args.hub_endpoint,
        allow_public_bucket=args.allow_public_bucket,
    )
    runtime.say(
        f"run {plan.run_name}: {plan.replicas} replica(s), topology {plan.topology}, "
        f"{plan.network} network"
    )
    views = launch.up()
    runtime.say(summary(plan, views, jobs.namespace, args.hub_endpoint))
    return 0


def run_logs(args: argparse.Namespace, runtime: Runtime) -> int:
    jobs = _hub(args, _token(runtime))
    views = jobs.of_run(args.run_name)
    selected = [
        view
        for view in views
        if (args.role is None or view.role == args.role)
        and (args.job is None or view.id == args.job)
    ]
    if not selected:
        status = hints.command("status", args.run_name, jobs.namespace, args.hub_endpoint)
        raise DeployError(
            f"no job of run {args.run_name} in namespace {jobs.namespace} matches "
            f"(jobs: {', '.join(view.name for view in views) or 'none'}): check the filters, or "
            f"list them with {status}"
        )
    print_logs(jobs, selected, runtime.say, follow=args.follow, tail=args.tail)
    return 0


def run_rehearse(args: argparse.Namespace, trainer_args: Sequence[str], runtime: Runtime) -> int:
    plan = preflight.checked(plan_from_args(args, trainer_args, runtime.clock))
    if args.dry_run:  # what would be rehearsed is what `up --dry-run` shows
        return run_up(args, trainer_args, runtime)
    refused = host_refusal(plan)
    if refused is not None:
        raise DeployError(refused)
    root = source_root()
    base = args.image_base or (root / ".venv-e2e" / "bin" / "python" if root else None)
    if base is None or not base.is_file() or not os.access(base, os.X_OK):
        raise DeployError(
            f"no Python to make the vLLM image from ({base or 'no checkout'}): run "
            "`make e2e-venv` in the checkout, or pass --image-base PYTHON"
        )
    if args.workdir is not None and args.workdir.exists() and any(args.workdir.iterdir()):
        raise DeployError(
            f"--workdir {args.workdir} is not empty (an earlier rehearsal's?): name a new "
            "folder, or remove that one"
        )
    # Not under /tmp: every job gets a /tmp of its own, which would hide it from the jobs.
    workdir = (args.workdir or Path(tempfile.mkdtemp(prefix=f"rehearse-{plan.run_name}-",
                                                     dir="/var/tmp"))).resolve()  # fmt: skip
    if workdir.is_relative_to("/tmp"):
        raise DeployError(
            f"--workdir {workdir} is under /tmp, which every rehearsed job gets a fresh copy of "
            "(a container's own): choose a folder elsewhere (default: one in /var/tmp)"
        )
    runtime.say(f"rehearsing run {plan.run_name} in {workdir} (jobs, logs, the bucket)")
    Rehearsal(
        plan, base, workdir, runtime.say, steps=args.steps,
        ready_timeout_s=args.ready_timeout, train_timeout_s=args.train_timeout,
    ).run()  # fmt: skip
    if args.workdir is None:  # a folder of our own: gone once it passed (kept when it failed)
        shutil.rmtree(workdir, ignore_errors=True)
        runtime.say(f"removed {workdir} (--workdir keeps the jobs' logs and the bucket)")
    return 0


def dispatch(args: argparse.Namespace, trainer_args: Sequence[str], runtime: Runtime) -> int:
    if args.command == "up":
        return run_up(args, trainer_args, runtime)
    if args.command == "rehearse":
        return run_rehearse(args, trainer_args, runtime)
    if args.command == "logs":
        return run_logs(args, runtime)
    token = _token(runtime)
    jobs = _hub(args, token)
    if args.command == "status":
        runtime.say(report(jobs, args.run_name, token, runtime.probe))
    else:
        down(jobs, args.run_name, runtime.say)
    return 0


def main(argv: Sequence[str] | None = None, runtime: Runtime | None = None) -> int:
    runtime = runtime or Runtime()
    argv = list(sys.argv[1:] if argv is None else argv)
    trainer_args: list[str] = []
    if "--" in argv:
        split = argv.index("--")
        argv, trainer_args = argv[:split], argv[split + 1 :]
    parser = build_parser()
    args = parser.parse_args(argv)
    if trainer_args and args.command not in ("up", "rehearse"):
        parser.error("only `up` and `rehearse` take trainer flags after --")
    if args.command in ("up", "rehearse"):
        check_up_args(parser, args)
    try:
        return dispatch(args, trainer_args, runtime)
    except BadFlags as exc:
        print(f"error: {exc}", file=runtime.err)
        return 2
    except DeployError as exc:
        print(f"error: {exc}", file=runtime.err)
    except HUB_ERRORS as exc:
        where = args.hub_endpoint or "the default Hub"
        print(
            f"error: the Hub call failed: {exc}\ncheck the endpoint ({where}), that your token "
            "can write to the namespace (`hf auth whoami`) and that the namespace has access "
            "to Jobs",
            file=runtime.err,
        )
    except KeyboardInterrupt:
        print("interrupted", file=runtime.err)
        return 130
    return 1
