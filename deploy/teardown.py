"""``deploy down``: cancel every job of a run that has not ended yet.

The trainer jobs go first: trainer node 0 is the home of the scaler (a fleet that sizes itself),
which may launch a replica job at any moment. Once every trainer job has ended (waited for up to
``TRAINER_END_S``), the other jobs are cancelled, then the run is listed again and whatever was
launched meanwhile (a launch the scaler sent just before it stopped) is cancelled too, until a
listing shows nothing new (at most ``SWEEPS`` listings). So no launch races the teardown: the
one that could start more jobs is stopped before the jobs it would add to are counted.
"""

from __future__ import annotations

from collections.abc import Callable

from deploy.clock import Clock, SystemClock
from deploy.errors import DeployError
from deploy.jobs import HUB_ERRORS, HubJobs, JobView
from deploy.specs import RUN_LABEL

TRAINER_END_S = 120.0  # the longest wait for the cancelled trainer jobs to end
POLL_S = 2.0
SWEEPS = 3  # listings after the first cancels that may still find a late launch


def down(
    jobs: HubJobs, run_name: str, say: Callable[[str], None], clock: Clock | None = None
) -> None:
    """Cancel the run's active jobs (module docstring); one line per job. Raises if a cancel
    fails or none exist."""
    clock = clock or SystemClock()
    views = jobs.of_run(run_name)
    if not views:
        raise DeployError(
            f"no jobs labelled {RUN_LABEL}={run_name} in namespace {jobs.namespace}: check "
            "--run-name and --namespace"
        )
    failures: list[str] = []
    commands: list[str] = []
    trainers = [view for view in views if view.role == "trainer"]
    _cancel(jobs, trainers, say, failures, commands)
    _await_end(jobs, [view for view in trainers if not view.terminal], say, clock)
    _cancel(jobs, [view for view in views if view.role != "trainer"], say, failures, commands)
    seen = {view.id for view in views}
    for _ in range(SWEEPS):
        late = [view for view in jobs.of_run(run_name) if view.id not in seen]
        if not late:
            break
        seen |= {view.id for view in late}
        say(f"{len(late)} job(s) of the run appeared meanwhile (the scaler's launches):")
        _cancel(jobs, late, say, failures, commands)
    if failures:
        raise DeployError(
            "could not cancel: " + "; ".join(failures) + "\nrun `deploy down` again, or cancel "
            "them yourself (the namespace comes with the id): " + " ; ".join(commands)
        )


def _cancel(
    jobs: HubJobs,
    views: list[JobView],
    say: Callable[[str], None],
    failures: list[str],
    commands: list[str],
) -> None:
    for view in views:
        if view.terminal:
            say(f"{view.name} (job {view.id}): already {view.stage}")
            continue
        try:
            jobs.cancel(view.id)
        except HUB_ERRORS as exc:
            failures.append(f"{view.name} (job {view.id}): {exc}")
            commands.append(f"hf jobs cancel {jobs.namespace}/{view.id}")
            continue
        say(f"{view.name} (job {view.id}): cancelled (was {view.stage})")


def _await_end(
    jobs: HubJobs, trainers: list[JobView], say: Callable[[str], None], clock: Clock
) -> None:
    """Until every one of ``trainers`` has ended, or ``TRAINER_END_S``: then go on (the
    sweep still catches a launch), saying so."""
    deadline = clock.monotonic() + TRAINER_END_S
    pending = list(trainers)
    while pending:
        try:
            pending = [view for view in pending if not jobs.inspect(view.id).terminal]
        except HUB_ERRORS as exc:
            say(f"could not see whether the trainer ended ({exc}); going on")
            return
        if not pending:
            return
        if clock.monotonic() >= deadline:
            names = ", ".join(view.name for view in pending)
            say(f"{names} not ended {TRAINER_END_S:.0f} s after its cancel; cancelling the "
                "rest, then sweeping for late launches")  # fmt: skip
            return
        clock.sleep(POLL_S)
