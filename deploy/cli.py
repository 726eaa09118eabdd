"""Command line: ``rollout-deploy up|rehearse|status|logs|down`` and ``rollout-deploy fleet
up|status|down`` (also ``python -m deploy``).

``up`` takes the trainer's own flags after ``--``. Every command talks to the Hub through
``HfApi(endpoint=--hub-endpoint or $HF_ENDPOINT, token=<your HF token>)``, once the Hub answers
at all (``deploy.reach``: no network is said in seconds, as the network); ``up --dry-run``
prints the job specs as JSON on stdout and what they cost on stderr (per hour, and the bound the
jobs' time caps set), and needs neither a token nor the network.

Exit codes: 0 done, 1 a failure explained on stderr (with what to do next), 2 bad flags (ours,
or a job's: ``up`` reads every job's flags with its entry point's parser first), 130 interrupted.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from huggingface_hub import HfApi, get_token

from deploy import fleet, health, hints, preflight
from deploy.clock import Clock, SystemClock
from deploy.errors import DeployError
from deploy.install import source_root
from deploy.jobs import HUB_ERRORS, NETWORK_ERRORS, HubJobs
from deploy.launch import Launch, summary
from deploy.logs import print_logs
from deploy.plan import RunPlan
from deploy.plan_jobs import dry_run_specs
from deploy.preflight import BadFlags
from deploy.prices import plan_cost
from deploy.reach import network_error, reachable
from deploy.rehearsal.run import Rehearsal, host_refusal
from deploy.rehearsal.stand_ins import sim_replica_argv
from deploy.scale_flags import budget_refusal, scaler_summary
from deploy.specs import ROLES
from deploy.status import report
from deploy.teardown import down
from deploy.up_flags import add_up_flags, check_up_args, fleet_of, plan_from_args
from deploy.wheel import Builder, build_wheel, publish_code
from proxy.config.programs import DefaultsFormatter, EnvDefault, OneLineParser, version_flag
from proxy.config.units import LIFETIME, DurationArg

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


LIFETIME_ARG = DurationArg(bare=LIFETIME, positive=True)  # a bare 10 meant minutes, not seconds
TOKEN = "Your HF token: HF_TOKEN, else the one `hf auth login` saved."
PLAN_TOKEN = f"{TOKEN[:-1]} (not for --dry-run)."  # the commands that have a --dry-run
EPILOG = f"{TOKEN} Each command lists its flags: rollout-deploy up --help."


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="rollout-deploy",
        formatter_class=DefaultsFormatter,
        description="Deploy a rollout fleet (vLLM replicas, proxy, trainer) on Hugging Face Jobs.",
        epilog=EPILOG,
    )
    version_flag(parser)
    common = OneLineParser(add_help=False)
    common.add_argument(
        "--hub-endpoint",
        action=EnvDefault,
        env="HF_ENDPOINT",
        help="Hub API base URL (default: none, huggingface_hub's: https://huggingface.co)",
    )
    common.add_argument(
        "--namespace", help="where the jobs run (default: up: the bucket's; else your user)"
    )
    commands = parser.add_subparsers(dest="command", required=True)
    add_up_flags(
        commands.add_parser(
            "up",
            parents=[common],
            help="launch a run (trainer flags after --)",
            formatter_class=DefaultsFormatter,
            epilog=PLAN_TOKEN,
        )
    )
    rehearse = commands.add_parser(
        "rehearse",
        parents=[common],
        formatter_class=DefaultsFormatter,
        help="run the jobs `up` would launch on this machine first (root, Linux): images, "
        "install steps, flags, network and mounts as planned, a tiny model, a few steps",
    )
    add_up_flags(rehearse)
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
    add("--train-timeout", type=LIFETIME_ARG, default="15m", help="how long the trainer may take")
    add(
        "--replica-backend",
        choices=("vllm", "sim"),
        default="vllm",
        help="what the replica jobs run: vLLM's CPU build, or the simulated replica (the same "
        "HTTP contract, no model, up in seconds: a scaler's rehearsal)",
    )
    add(
        "--sim-args",
        default="",
        help="the simulated replicas' flags, one quoted string (their speed: --gen-token-s, "
        "--later-version with --later-gen-token-s, --max-num-seqs; see rollout-replica --help)",
    )
    for name, sub in _commands(commands, common, (
        ("status", "stage and health of every job of a run, and the proxy's figures"),
        ("logs", "the logs of a run's jobs"),
        ("down", "cancel every job of a run"),
    )):  # fmt: skip
        sub.add_argument("--run-name", required=True, help="the run's name, as `up` printed it")
        if name == "logs":
            sub.add_argument(
                "--role", choices=ROLES, help="only this role's jobs (default: every role)"
            )
            sub.add_argument("--job", help="only this job id (default: every job)")
            sub.add_argument("--follow", action="store_true", help="stream until the jobs end")
            sub.add_argument(
                "--tail", type=int, help="only the last N lines of each job (default: all)"
            )
    _fleet_commands(commands, common)
    return parser


def _commands(
    commands: argparse._SubParsersAction[Any],
    common: argparse.ArgumentParser,
    table: Sequence[tuple[str, str]],
) -> list[tuple[str, argparse.ArgumentParser]]:
    """A subcommand per (name, help) of ``table``, each taking the ``common`` flags."""
    return [
        (
            name,
            commands.add_parser(
                name,
                parents=[common],
                help=text,
                formatter_class=DefaultsFormatter,
                epilog=TOKEN,
            ),
        )
        for name, text in table
    ]


def _fleet_commands(
    commands: argparse._SubParsersAction[Any], common: argparse.ArgumentParser
) -> None:
    """``fleet up|status|down``: a shared fleet (``deploy.fleet``)."""
    fleet = commands.add_parser(
        "fleet",
        formatter_class=DefaultsFormatter,
        help="a fleet of replicas and a proxy job that many runs share (deploy up --fleet)",
    )
    sub = fleet.add_subparsers(dest="fleet_command", required=True)
    up = sub.add_parser(
        "up", parents=[common], formatter_class=DefaultsFormatter, epilog=PLAN_TOKEN,
        help="launch the fleet's replicas and its proxy job",
    )  # fmt: skip
    add_up_flags(up, fleet=True)
    up.set_defaults(shared=True)
    for name, command in _commands(sub, common, (
        ("status", "the fleet's jobs, the runs its proxy serves, the runs' trainer jobs"),
        ("down", "cancel the fleet's jobs (refused while runs train on it, unless --force)"),
    )):  # fmt: skip
        command.add_argument("--fleet", required=True, help="the fleet's name")
        if name == "down":
            command.add_argument(
                "--force", action="store_true", help="also cancel the runs training on it"
            )


def _token(runtime: Runtime) -> str:
    token = runtime.token()
    if not token:
        raise DeployError(
            "no HF token found: run `hf auth login` (a token with write access to the jobs' "
            "namespace) or set HF_TOKEN"
        )
    return token


def _hub(args: argparse.Namespace, token: str, namespace: str | None = None) -> HubJobs:
    """The Hub client for ``namespace`` (default: --namespace, else the token's user), once the
    Hub answers at all (``deploy.reach``: no network is said in seconds, as the network)."""
    reachable(args.hub_endpoint)
    api = HfApi(endpoint=args.hub_endpoint, token=token)
    return HubJobs(api, namespace or args.namespace or api.whoami()["name"])


def run_up(args: argparse.Namespace, trainer_args: Sequence[str], runtime: Runtime) -> int:
    # Every job's flags read by its own entry point before anything is launched or printed.
    plan = preflight.checked(plan_from_args(args, trainer_args, runtime.clock))
    refused = budget_refusal(plan)
    if refused is not None:
        raise BadFlags(refused)
    scaler = scaler_summary(plan)
    if args.dry_run:  # the specs on stdout (JSON for tools), what they cost on stderr
        planned = dry_run_specs(plan)
        specs = [spec.describe(plan.namespace) for spec in planned]
        print(json.dumps(specs, indent=2), file=runtime.out)
        print(plan_cost(planned), file=runtime.err)
        if scaler is not None:
            print(scaler, file=runtime.err)
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
    if plan.shared:
        runtime.say(
            f"fleet {plan.run_name}: {plan.replicas} replica(s) and a proxy job, private network"
        )
    elif plan.fleet:
        runtime.say(f"run {plan.run_name} on fleet {plan.fleet} (weight {plan.run_weight:g})")
    else:
        runtime.say(
            f"run {plan.run_name}: {plan.replicas} replica(s), topology {plan.topology}, "
            f"{plan.network} network"
        )
        if scaler is not None:
            runtime.say(scaler)
    views = launch.up()
    if plan.shared:
        runtime.say(fleet.fleet_summary(plan, views, args.hub_endpoint))
    elif plan.fleet:
        runtime.say(fleet.joined_summary(plan, views, args.hub_endpoint))
    else:
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
    # A run on a fleet: the fleet (its replicas, its proxy job) is rehearsed with it.
    shared = preflight.checked(fleet_of(plan)) if plan.fleet else None
    sim_args = tuple(shlex.split(args.sim_args))
    if sim_args and args.replica_backend != "sim":
        raise BadFlags("--sim-args are the simulated replicas' flags: add --replica-backend sim")
    if args.replica_backend == "sim":
        sim_replica_argv(plan, sim_args)  # refused flags stop here, before anything is made
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
    on = f" on fleet {plan.fleet} (its jobs first)" if plan.fleet else ""
    runtime.say(f"rehearsing run {plan.run_name}{on} in {workdir} (jobs, logs, the bucket)")
    Rehearsal(
        plan, base, workdir, runtime.say, steps=args.steps,
        ready_timeout_s=args.ready_timeout, train_timeout_s=args.train_timeout, fleet=shared,
        replica_backend=args.replica_backend, sim_args=sim_args,
    ).run()  # fmt: skip
    if args.workdir is None:  # a folder of our own: gone once it passed (kept when it failed)
        shutil.rmtree(workdir, ignore_errors=True)
        runtime.say(f"removed {workdir} (--workdir keeps the jobs' logs and the bucket)")
    return 0


def run_fleet(args: argparse.Namespace, runtime: Runtime) -> int:
    if args.fleet_command == "up":
        return run_up(args, (), runtime)
    token = _token(runtime)
    jobs = _hub(args, token)
    if args.fleet_command == "status":
        runtime.say(fleet.fleet_status(jobs, args.fleet, token, runtime.probe))
    else:
        fleet.fleet_down(
            jobs, args.fleet, runtime.say, force=args.force, endpoint=args.hub_endpoint
        )
    return 0


def dispatch(args: argparse.Namespace, trainer_args: Sequence[str], runtime: Runtime) -> int:
    if args.command == "fleet":
        return run_fleet(args, runtime)
    if args.command == "up":
        return run_up(args, trainer_args, runtime)
    if args.command == "rehearse":
        return run_rehearse(args, trainer_args, runtime)
    if args.command == "logs":
        return run_logs(args, runtime)
    token = _token(runtime)
    jobs = _hub(args, token)
    if args.command == "status":
        runtime.say(report(jobs, args.run_name, token, runtime.probe, runtime.clock.wall()))
        return 0
    if any(not job.terminal for job in fleet.runs_on(jobs, args.run_name)):
        raise DeployError(
            f"{args.run_name} is a fleet with runs training on it: stop them one by one "
            "(`deploy down --run-name RUN`), or the fleet with them: "
            + hints.fleet_command(
                "down", args.run_name, jobs.namespace, args.hub_endpoint, "--force"
            )
        )
    down(jobs, args.run_name, runtime.say, runtime.clock)
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
    if args.command in ("up", "rehearse") or getattr(args, "fleet_command", None) == "up":
        check_up_args(parser, args)
    try:
        return dispatch(args, trainer_args, runtime)
    except BadFlags as exc:
        print(f"error: {exc}", file=runtime.err)
        return 2
    except DeployError as exc:
        print(f"error: {exc}", file=runtime.err)
    except NETWORK_ERRORS as exc:  # lost later, after `reachable`: the same line
        where = args.hub_endpoint or "the default Hub"
        print(f"error: {network_error(where, exc)}", file=runtime.err)
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
