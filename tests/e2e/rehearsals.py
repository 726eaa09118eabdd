"""What the rehearsal tests share: the run docs/deploy.md launches first, with one replica (each
vLLM CPU engine costs a minute and a core here) and a test's own changes, as ``deploy rehearse``
flags or as the plan ``deploy up`` would launch (``plan_of``, preflight left out: the rehearsal
needs no token, bucket or Hub)."""

from __future__ import annotations

from deploy.plan import RunPlan
from tests.support.docs import deploy_commands


def readme_plan(*changes: str) -> list[str]:
    """``deploy up``'s argv of the docs' first run, one replica, ``changes`` before its ``--``
    (argparse keeps the last of a flag given twice)."""
    argv = deploy_commands("up", page="docs/deploy.md")[0]  # the run the docs launch first
    argv[argv.index("--replica-count") + 1] = "1"
    split = argv.index("--")
    return [*argv[:split], *changes, *argv[split:]]


def plan_of(*changes: str) -> RunPlan:
    """The plan of ``readme_plan(*changes)``."""
    from deploy.cli import build_parser
    from deploy.up_flags import plan_from_args
    from tests.support.clock import SteppingClock

    argv = readme_plan(*changes)
    split = argv.index("--")
    args = build_parser().parse_args(["up", *argv[:split]])
    return plan_from_args(args, argv[split + 1 :], SteppingClock())
