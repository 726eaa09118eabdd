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
flags are listed, not under the usage of some forty flags; a flag it does not know with the
closest one it does (``did you mean``, as a ``PROXY_*`` variable or a config key is answered:
``spelling``); and it takes no abbreviation (argparse's ``allow_abbrev`` off, for every program
and subcommand): ``--replica-url`` is refused, not read as ``--replica-urls``, so a flag added
later can never change what an old command line means. ``install_hint`` words how to install an
extra once, for every message that needs one: the project is installed from a checkout, it is
not published on PyPI. ``help_text`` makes a module docstring a ``--help`` description.
Imports the standard library and ``proxy.config``'s ``units``, ``spelling`` and ``deprecated``
only: every program's parser, and ``top``'s, is built on it.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence
from typing import Any, NoReturn

from proxy import __version__
from proxy.config.deprecated import CanonicalFormatter, canonical
from proxy.config.spelling import closest
from proxy.config.units import DurationArg, SizeArg

DEFAULT_MARK = "default:"
UNRECOGNIZED = "unrecognized arguments: "


class OneLineParser(argparse.ArgumentParser):
    """A bad flag: ``PROG: error: MESSAGE (PROG --help lists the flags)``, exit 2; an unknown
    flag's message ends with the closest flag of the parsers that read the command line (this
    one and the subcommands it went into). No abbreviations, unless a caller asks for them; its
    help names each flag under its names in use only (``CanonicalFormatter``)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        kwargs.setdefault("formatter_class", CanonicalFormatter)
        super().__init__(*args, **kwargs)
        self.register("action", "parsers", _Subcommands)

    def readers(self) -> list[argparse.ArgumentParser]:
        """This parser and the subcommands' it went into (each one of a level it did not reach)."""
        found: list[argparse.ArgumentParser] = [self]
        for action in self._actions:
            if isinstance(action, _Subcommands):
                chosen = action.chosen
                for sub in [chosen] if chosen is not None else list(action.choices.values()):
                    found += sub.readers() if isinstance(sub, OneLineParser) else [sub]
        return found

    def deepest(self) -> argparse.ArgumentParser:
        """The subcommand the command line went into, deepest first (this parser: none)."""
        for action in self._actions:
            if isinstance(action, _Subcommands) and action.chosen is not None:
                chosen = action.chosen
                return chosen.deepest() if isinstance(chosen, OneLineParser) else chosen
        return self

    def error(self, message: str) -> NoReturn:
        """Said as the subcommand the command line went into (its flags are what its --help
        lists), whichever parser found the error: argparse finds a subcommand's unknown flags
        at the top, and a program's own checks after parsing are given the top parser."""
        explained = did_you_mean(message, self.readers())
        prog = self.deepest().prog
        self.exit(2, f"{prog}: error: {explained} ({prog} --help lists the flags)\n")


class _Subcommands(argparse._SubParsersAction):  # type: ignore[type-arg]
    """argparse's subcommands, keeping the one last chosen (``OneLineParser.readers``)."""

    chosen: argparse.ArgumentParser | None = None

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        self.chosen = self.choices.get(values[0])
        super().__call__(parser, namespace, values, option_string)


def did_you_mean(message: str, parsers: Sequence[argparse.ArgumentParser]) -> str:
    """argparse's ``unrecognized arguments: ...`` with the closest known flag of each unknown
    one (``--replcia-urls`` -> ``--replica-urls``); any other message as it is."""
    if not message.startswith(UNRECOGNIZED):
        return message
    known = [name for parser in parsers for action in parser._actions for name in canonical(action)]
    words = message.removeprefix(UNRECOGNIZED).split()
    flags = [word.split("=", 1)[0] for word in words if word[:2] == "--" and len(word) > 2]
    near = {flag: found for flag in flags if (found := closest(flag, known)) is not None}
    if not near:
        return message
    if len(near) == 1:
        return f"{message}: did you mean {next(iter(near.values()))}?"
    return f"{message}: did you mean " + ", ".join(f"{n} for {f}" for f, n in near.items()) + "?"


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


class DefaultsFormatter(CanonicalFormatter):
    """Every option's help with its default and its variable, as the module docstring says; a
    duration's or a size's value named ``SECONDS``, ``BYTES`` (or its flag's unit); a flag under
    its names in use only (``deprecated.canonical``)."""

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


def install_hint(extra: str) -> str:
    """How to install ``extra`` (``trainer``, ``top``, ...), said the one way every message says
    it: rollout-proxy is installed from its checkout, not from PyPI, where it is not published."""
    return f"pip install -e '.[{extra}]' in a checkout of rollout-proxy (it is not on PyPI)"


def help_text(doc: str | None) -> str:
    """A module docstring as a ``--help`` description: reStructuredText's ````literal```` marks
    as the single backticks every help line uses."""
    return (doc or "").replace("``", "`")
