"""``deploy down``: cancel every job of a run that has not ended yet."""

from __future__ import annotations

from collections.abc import Callable

from deploy.errors import DeployError
from deploy.jobs import HUB_ERRORS, HubJobs
from deploy.specs import RUN_LABEL


def down(jobs: HubJobs, run_name: str, say: Callable[[str], None]) -> None:
    """Cancel the run's active jobs; one line per job. Raises if a cancel fails or none exist."""
    views = jobs.of_run(run_name)
    if not views:
        raise DeployError(
            f"no jobs labelled {RUN_LABEL}={run_name} in namespace {jobs.namespace}: check "
            "--run-name and --namespace"
        )
    failures, commands = [], []
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
    if failures:
        raise DeployError(
            "could not cancel: " + "; ".join(failures) + "\nrun `deploy down` again, or cancel "
            "them yourself (the namespace comes with the id): " + " ; ".join(commands)
        )
