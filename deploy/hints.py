"""The follow-up commands the deploy commands print, spelled out for the user's own run."""

from __future__ import annotations

import shlex


def command(
    subcommand: str, run_name: str, namespace: str, endpoint: str | None, *extra: str
) -> str:
    """``python -m deploy SUBCOMMAND --run-name R --namespace NS [...]``, ready to paste."""
    argv = ["python", "-m", "deploy", subcommand, "--run-name", run_name, "--namespace", namespace]
    if endpoint is not None:
        argv += ["--hub-endpoint", endpoint]
    return shlex.join([*argv, *extra])
