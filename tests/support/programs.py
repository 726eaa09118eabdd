"""Every parser of the five programs (``rollout-proxy`` and its ``top``, ``rollout-replica`` with
each backend, ``rollout-trainer``, ``rollout-deploy`` and its subcommands, ``python -m benchmarks``
with ``fleet`` and ``learn``), built as each program builds it, for the tests that hold them to
one vocabulary; and those of the ``python -m`` modules the pages and the suites run (``TOOLS``,
``CHILDREN``)."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterator

from benchmarks.__main__ import build_parser as benchmarks_parser
from benchmarks.fleet.cli import build_parser as fleet_parser
from benchmarks.learn.cli import build_parser as learn_parser
from deploy.cli import build_parser as deploy_parser
from docsgen.parsers import module_parser
from proxy.config import build_parser as proxy_parser
from proxy.console.flags import build_parser as top_parser
from replica_entry.cli import build_parser as sim_parser
from replica_entry.vllm_backend import build_parser as vllm_parser
from trainer_entry.flags import build_parser as trainer_parser

# Program -> its parser; ``python -m <module>`` runs each (``--version``).
PARSERS: dict[str, Callable[[], argparse.ArgumentParser]] = {
    "rollout-proxy": proxy_parser,
    "rollout-proxy top": top_parser,
    "rollout-replica": sim_parser,
    "rollout-replica --backend vllm": vllm_parser,
    "rollout-trainer": trainer_parser,
    "rollout-deploy": deploy_parser,
    "python -m benchmarks": benchmarks_parser,
    "python -m benchmarks fleet": fleet_parser,
    "python -m benchmarks learn": learn_parser,
}
MODULES = {
    "rollout-proxy": "proxy",
    "rollout-replica": "replica_entry",
    "rollout-trainer": "trainer_entry",
    "rollout-deploy": "deploy",
    "python -m benchmarks": "benchmarks",
}


# The ``python -m`` tools a user runs (the pages show each), and the children the benchmark
# suites start (never typed by a user: held to no vocabulary, but to no abbreviation either).
TOOLS = (
    "benchmarks.demo",
    "benchmarks.micro.policy",
    "benchmarks.sync.mirror",
    "trainer_entry.math_data",
    "trainer_entry.tiny_model",
)
CHILDREN = (
    "benchmarks.harness.blast",
    "benchmarks.harness.fast_replica",
    "benchmarks.harness.passthrough",
    "benchmarks.suites.cpu_profile",
)
# The micro benchmarks a developer runs by hand (no page shows them): held to no abbreviation.
MICRO = ("benchmarks.micro.stream",)


def tool_parsers(modules: tuple[str, ...] = TOOLS) -> list[argparse.ArgumentParser]:
    """The parsers of ``modules``, as each module's ``main`` builds it."""
    return [module_parser(module) for module in modules]


def walk(parser: argparse.ArgumentParser) -> Iterator[argparse.ArgumentParser]:
    """``parser`` and every subcommand's parser under it."""
    yield parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                yield from walk(sub)


def every_parser() -> list[argparse.ArgumentParser]:
    return [sub for build in PARSERS.values() for sub in walk(build())]


def options(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    """The parser's flags, less ``--help`` and ``--version``."""
    return [
        action
        for action in parser._actions
        if action.option_strings and action.dest not in ("help", "version")
    ]
