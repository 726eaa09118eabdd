"""What the five programs' command lines share (``rollout-proxy``, ``rollout-proxy top``,
``rollout-replica``, ``rollout-trainer``, ``rollout-deploy``, ``python -m benchmarks``): the help
of a flag, its default and the variable it reads, ``--version``, a bad flag in one line.

``DefaultsFormatter`` ends every option's help with its default as a user would write it:
``(default: none)`` for "not set", ``on``/``off`` for a switch (``off`` for ``--no-X`` too: the
switch itself), ``(required)`` for a flag without a default, a duration or a size in the form
its parser reads back (``15 min``, ``1 GiB``: ``proxy.config.units``); a help that states its
default itself (``default: ...``) is left as written. A flag that reads a variable when it is
not given (``EnvDefault``) ends with ``[env NAME]``, as every ``rollout-proxy`` flag does; its
shown default is the one without the variable, never the variable's value (it may be a secret).
argparse's ``ArgumentDefaultsHelpFormatter`` shows a default only where a flag has help, prints
``None`` for "not set" and repeats a default the help already states.

``version_flag`` is the one ``--version``: ``proxy.__version__``, read from the installed
distribution's metadata. ``OneLineParser`` answers a bad flag in one line naming it and where the
flags are listed, not under the usage of some forty flags. Imports the standard library and
``proxy.config.units`` only: every program's parser, and ``top``'s, is built on it.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence
from typing import Any, NoReturn

from proxy import __version__
from proxy.config.units import DurationArg, SizeArg

DEFAULT_MARK = "default:"


class OneLineParser(argparse.ArgumentParser):
    """A bad flag: ``PROG: error: MESSAGE (PROG --help lists the flags)``, exit 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} ({self.prog} --help lists the flags)\n")


class EnvDefault(argparse._StoreAction):
    """A flag that, when not given, takes the variable ``env`` (else ``default``). ``--help``
    shows ``default`` and ``[env NAME]``, never the variable's value. ``read=False``: the
    variable is read by the program this flag configures (vLLM inherits ``VLLM_API_KEY``), not
    by this parser, whose checks then see the environment they are given (``deploy``'s preflight
    checks a job's flags against the job's variables, not this machine's)."""

    def __init__(
        self,
        option_strings: Sequence[str],
        dest: str,
        *,
        env: str,
        read: bool = True,
        **kwargs: Any,
    ) -> None:
        self.env = env
        self.fallback = kwargs.get("default")
        if read:
            kwargs["default"] = os.environ.get(env, self.fallback)
        super().__init__(option_strings, dest, **kwargs)


class DefaultsFormatter(argparse.HelpFormatter):
    """Every option's help with its default and its variable, as the module docstring says; a
    duration's or a size's value named ``SECONDS``, ``BYTES`` (or its flag's unit)."""

    def _get_default_metavar_for_optional(self, action: argparse.Action) -> str:
        if isinstance(action.type, DurationArg | SizeArg):
            return action.type.metavar
        return super()._get_default_metavar_for_optional(action)

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        if not action.option_strings or action.default is argparse.SUPPRESS:
            return text
        if DEFAULT_MARK not in text and "%(default)" not in text:
            text = f"{text} ({shown_default(action)})".lstrip()
        if isinstance(action, EnvDefault):
            text += f" [env {action.env}]"
        return text


class RawDescriptionDefaultsFormatter(DefaultsFormatter, argparse.RawDescriptionHelpFormatter):
    """``DefaultsFormatter`` with the description printed as written (a docstring's lines)."""


def shown_default(action: argparse.Action) -> str:
    """What an option's help ends with: ``required``, or its default as a user would write it."""
    if action.required:
        return "required"
    default = action.fallback if isinstance(action, EnvDefault) else action.default
    if isinstance(action, argparse._StoreConstAction) and isinstance(action.const, bool):
        return "default: off"  # --keep, --no-adapter-push: the switch itself, not its dest
    if default is None or default == [] or default == "":
        return "default: none"
    if isinstance(default, bool):
        return f"default: {'on' if default else 'off'}"
    if isinstance(action.type, DurationArg | SizeArg):
        value = action.type(default) if isinstance(default, str) else default
        return f"default: {action.type.show(value)}".replace("%", "%%")
    return "default: %(default)s"  # argparse fills it in (a literal % in a default is escaped)


def version_flag(parser: argparse.ArgumentParser, name: str | None = None) -> None:
    """``--version``: ``<name> <version>``; ``name`` defaults to the program's own name (the
    first word of ``prog``, never a subcommand's)."""
    name = name or (parser.prog or "").split()[0]
    parser.add_argument(
        "--version",
        action="version",
        version=f"{name} {__version__}",
        help="print the program's name and version, and exit",
    )
