"""What ``python -m benchmarks SUITE`` runs: one module per suite, each with its grid, its
measurement, its table and a ``suite(args) -> (results, text)``; a result row with ``"failed":
true`` (``ab``: a round with errors) makes the run exit 1 once its table and JSON are out.
``fleet``, with flags of its own, is ``benchmarks.fleet``."""

from __future__ import annotations

import argparse
import importlib
from typing import Any

# Suite name -> its module, imported when that suite runs (a suite's imports are its own).
SUITES = {
    "overhead": "benchmarks.suites.overhead",
    "routing": "benchmarks.suites.routing",
    "sync": "benchmarks.suites.sync",
    "policy": "benchmarks.suites.policy",
    "soak": "benchmarks.suites.soak",
    "scale": "benchmarks.suites.scale",
    "burst": "benchmarks.suites.burst",
    "profile": "benchmarks.suites.cpu_profile",
    "ab": "benchmarks.suites.ab.suite",
}


def run(name: str, args: argparse.Namespace) -> tuple[list[dict[str, Any]], str]:
    """Run suite ``name`` with the parsed command line; its results and its printed text."""
    results, text = importlib.import_module(SUITES[name]).suite(args)
    return results, text
