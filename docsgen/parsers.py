"""The parsers of the project's command lines, as each program builds them.

A program's parser is taken from its ``build_parser`` where it has one; otherwise its ``main``
is called and stopped at its first ``parse_args``/``parse_known_args`` (``capture``), so a
parser built inside ``main`` is walked as it is, never read off ``--help``. Nothing else of the
program runs. ``command_parser`` maps a command as a user types it (``rollout-deploy up ...``,
``python -m benchmarks fleet ...``) to the parser that reads it and the words it reads.
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, NoReturn
from unittest import mock

# The project's packages (pyproject.toml's [tool.setuptools.packages.find]).
PACKAGES = ("proxy", "adapter_receiver", "replica_entry", "trainer_entry", "deploy", "benchmarks")
# Console scripts (pyproject.toml's [project.scripts]) and the module each runs.
SCRIPTS = {
    "rollout-proxy": "proxy",
    "rollout-replica": "replica_entry",
    "rollout-trainer": "trainer_entry",
    "rollout-deploy": "deploy",
}


class _Captured(Exception):
    def __init__(self, parser: argparse.ArgumentParser) -> None:
        super().__init__(parser.prog)
        self.parser = parser


def capture(main: Callable[..., Any], argv: Sequence[str] = ()) -> argparse.ArgumentParser:
    """The parser ``main(argv)`` builds, taken when it first parses (``main`` goes no further)."""

    def stop(parser: argparse.ArgumentParser, *args: Any, **kwargs: Any) -> NoReturn:
        raise _Captured(parser)

    takes_argv = bool(inspect.signature(main).parameters)
    with (
        mock.patch.object(argparse.ArgumentParser, "parse_args", stop),
        mock.patch.object(argparse.ArgumentParser, "parse_known_args", stop),
        mock.patch.object(sys, "argv", [main.__module__, *argv]),
    ):
        try:
            main(list(argv)) if takes_argv else main()
        except _Captured as found:
            return found.parser
    raise LookupError(f"{main.__module__}.main parsed no arguments")


def proxy_parser() -> argparse.ArgumentParser:
    """``rollout-proxy``'s flags as ``proxy.cli`` parses them (``--version`` included)."""
    from proxy import cli

    return capture(cli.main)


def top_parser() -> argparse.ArgumentParser:
    from proxy.console import top

    return capture(top.main)


def sim_parser() -> argparse.ArgumentParser:
    from replica_entry import cli

    return cli.build_parser()


def vllm_parser() -> argparse.ArgumentParser:
    from replica_entry import vllm_backend

    return vllm_backend.build_parser()


def trainer_parser() -> argparse.ArgumentParser:
    from trainer_entry import flags

    return flags.build_parser()


def deploy_parser() -> argparse.ArgumentParser:
    from deploy import cli

    return cli.build_parser()


def benchmarks_parser() -> argparse.ArgumentParser:
    from benchmarks import __main__ as benchmarks

    return capture(benchmarks.main)


def fleet_parser() -> argparse.ArgumentParser:
    from benchmarks.fleet import cli

    return cli.build_parser()


def learn_parser() -> argparse.ArgumentParser:
    from benchmarks.learn import cli

    return capture(cli.main)


def module_parser(module: str) -> argparse.ArgumentParser:
    """The parser of ``python -m MODULE`` for a module with a ``main(argv)``."""
    found = importlib.import_module(module)
    main = getattr(found, "main", None)
    if main is None:
        raise LookupError(f"python -m {module}: the module has no main(argv)")
    return capture(main)


def _backend(words: Sequence[str]) -> str | None:
    for i, word in enumerate(words):
        if word == "--":
            break
        if word.startswith("--backend="):
            return word.split("=", 1)[1]
        if word == "--backend" and i + 1 < len(words):
            return words[i + 1]
    return None


@dataclass(frozen=True)
class Reading:
    """A command's parser and the words it reads (a subcommand word already taken off when
    the program picks the parser by it: ``rollout-proxy top``, ``python -m benchmarks fleet``)."""

    program: str  # as the reference names it: "rollout-proxy top", "python -m benchmarks fleet"
    parser: argparse.ArgumentParser
    words: list[str]


def command_parser(module: str, words: Sequence[str]) -> Reading:
    """The parser of ``python -m MODULE WORDS...`` (a console script: its module, ``SCRIPTS``)."""
    words = list(words)
    if module == "proxy":
        if words[:1] == ["top"]:
            return Reading("rollout-proxy top", top_parser(), words[1:])
        return Reading("rollout-proxy", proxy_parser(), words)
    if module == "replica_entry":
        if _backend(words) == "vllm":
            return Reading("rollout-replica --backend vllm", vllm_parser(), words)
        return Reading("rollout-replica --backend sim", sim_parser(), words)
    if module == "trainer_entry":
        return Reading("rollout-trainer", trainer_parser(), words)
    if module == "deploy":
        return Reading("rollout-deploy", deploy_parser(), words)
    if module == "benchmarks":
        if words[:1] == ["fleet"]:
            return Reading("python -m benchmarks fleet", fleet_parser(), words[1:])
        if words[:1] == ["learn"]:
            return Reading("python -m benchmarks learn", learn_parser(), words[1:])
        return Reading("python -m benchmarks", benchmarks_parser(), words)
    return Reading(f"python -m {module}", module_parser(module), words)


def subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """A parser's subcommands by name (``rollout-deploy up``, ``fleet``), in order."""
    found: dict[str, argparse.ArgumentParser] = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            found.update(action.choices)
    return found


def options(parser: argparse.ArgumentParser) -> Iterator[argparse.Action]:
    """The parser's flags (no positionals, no subcommands), in the order ``--help`` lists them."""
    for action in parser._actions:
        if action.option_strings:
            yield action


def flag_names(parser: argparse.ArgumentParser) -> set[str]:
    """Every spelling of every flag of the parser (its subcommands' not included)."""
    return {name for action in options(parser) for name in action.option_strings}
