"""The follow-up commands the deploy commands print, spelled out for the user's own run."""

from __future__ import annotations

import shlex


def command(
    subcommand: str, run_name: str, namespace: str, endpoint: str | None, *extra: str
) -> str:
    """``python -m deploy SUBCOMMAND --run-name R --namespace NS [...]``, ready to paste."""
    return _pasteable([subcommand, "--run-name", run_name], namespace, endpoint, extra)


def fleet_command(
    subcommand: str, fleet: str, namespace: str, endpoint: str | None, *extra: str
) -> str:
    """``python -m deploy fleet SUBCOMMAND --fleet F --namespace NS [...]``."""
    return _pasteable(["fleet", subcommand, "--fleet", fleet], namespace, endpoint, extra)


def _pasteable(
    words: list[str], namespace: str, endpoint: str | None, extra: tuple[str, ...]
) -> str:
    argv = ["python", "-m", "deploy", *words, "--namespace", namespace]
    if endpoint is not None:
        argv += ["--hub-endpoint", endpoint]
    return shlex.join([*argv, *extra])
