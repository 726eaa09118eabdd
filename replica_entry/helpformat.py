"""The help of every entry point's flags (``rollout-replica``, ``rollout-trainer``,
``rollout-deploy``): one line of what a flag does, ending with its default.

argparse's ``ArgumentDefaultsHelpFormatter`` shows a default only where a flag has help, prints
``None`` for "not set" and repeats a default the help already states; this one writes
``(default: none)``, ``on``/``off`` for a switch (``off`` for ``--no-X`` too: the switch
itself), ``(required)`` for a flag without a default,
and leaves a help that says its default itself (``default: ...``) as written. ``version_flag``
is the one ``--version`` (``proxy.__version__``, the installed distribution's).
``OneLineParser`` answers a bad flag in one line naming it and where the flags are listed, not
under the usage of some forty flags (as ``rollout-proxy``'s own parser does). ``duration`` is
every duration flag's type: ``rollout-proxy``'s rule (``proxy.config.units``: ``90s``, ``500ms``,
``30m``, ``1.5h``, ``2d``, a plain number of seconds), finite and above 0.
"""

from __future__ import annotations

import argparse
import math
from typing import NoReturn

from proxy import __version__
from proxy.config.units import SECONDS_FORMS, parse_seconds

DEFAULT_MARK = "default:"


class OneLineParser(argparse.ArgumentParser):
    """A bad flag: ``PROG: error: MESSAGE (PROG --help lists the flags)``, exit 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} ({self.prog} --help lists the flags)\n")


class DefaultsFormatter(argparse.HelpFormatter):
    """Every option's help with its default, as the module docstring says."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        if not action.option_strings or action.default is argparse.SUPPRESS:
            return text
        if DEFAULT_MARK in text or "%(default)" in text:
            return text
        return f"{text} ({shown_default(action)})".lstrip()


def shown_default(action: argparse.Action) -> str:
    """What an option's help ends with: ``required``, or its default as a user would write it."""
    if action.required:
        return "required"
    default = action.default
    if isinstance(action, argparse._StoreConstAction) and isinstance(action.const, bool):
        return "default: off"  # --keep, --no-adapter-push: the switch itself, not its dest
    if default is None or default == [] or default == "":
        return "default: none"
    if isinstance(default, bool):
        return f"default: {'on' if default else 'off'}"
    return "default: %(default)s"  # argparse fills it in (a literal % in a default is escaped)


def version_flag(parser: argparse.ArgumentParser) -> None:
    """``--version``: ``<prog> <version>`` (the program's own name, never a subcommand's)."""
    name = (parser.prog or "").split()[0]
    parser.add_argument(
        "--version", action="version", version=f"{name} {__version__}", help="print it and exit"
    )


def duration(text: str) -> float:
    """Seconds of a duration flag's ``text`` (an argparse ``type``: its message follows
    ``argument --FLAG:``)."""
    try:
        seconds = float(parse_seconds(text))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{SECONDS_FORMS}, not {text!r}") from None
    if not math.isfinite(seconds) or seconds <= 0:
        raise argparse.ArgumentTypeError(f"must be longer than 0 (got {text!r})")
    return seconds
