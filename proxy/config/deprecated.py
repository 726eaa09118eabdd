"""Earlier names that mean something else elsewhere: kept for one release, warned, then refused.

One name, one meaning across the five programs, flags, ``PROXY_*`` variables and config-file keys
alike. Where a setting's earlier name is, in another program, the name of something else
(``--replicas``: replica URLs in ``rollout-proxy``, a count of replica jobs in
``rollout-deploy``), it still works in this release, and each use says so in one line on stderr
naming the name to use; release ``REFUSED_FROM`` refuses it (a test fails once the version
reaches it while one is left). ``--help`` and the generated reference show only the names in use
(``canonical``); the line says what the old name means elsewhere, so the reader knows why.

A flag carries its deprecated names with ``DeprecatedNames`` (a store action: the old name parses
to the same value as the new one); the proxy's variables and file keys are listed in
``settings.DEPRECATED`` and said by ``proxy.cli``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping, Sequence
from typing import Any

REFUSED_FROM = "0.2.0"


def deprecation(prog: str, old: str, new: str, why: str) -> str:
    """The one line a deprecated name's use prints."""
    return f"{prog}: {old} is deprecated ({why}): use {new}; release {REFUSED_FROM} refuses it"


class DeprecatedNames(argparse._StoreAction):
    """A flag whose names in ``deprecated`` (name -> what it means elsewhere) still work, each use
    said in one line on stderr naming the flag's own name (its first option string)."""

    def __init__(
        self,
        option_strings: Sequence[str],
        dest: str,
        *,
        deprecated: Mapping[str, str],
        **kwargs: Any,
    ) -> None:
        if not set(deprecated) < set(option_strings) or option_strings[0] in deprecated:
            raise ValueError(f"{dest}: deprecated names must be later option strings")
        self.deprecated = dict(deprecated)
        super().__init__(option_strings, dest, **kwargs)

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        if option_string in self.deprecated:
            line = deprecation(
                parser.prog, option_string, self.option_strings[0], self.deprecated[option_string]
            )
            print(line, file=sys.stderr, flush=True)
        super().__call__(parser, namespace, values, option_string)


def canonical(action: argparse.Action) -> list[str]:
    """An action's option strings less its deprecated ones (what help and the reference show)."""
    hidden = action.deprecated if isinstance(action, DeprecatedNames) else {}
    return [name for name in action.option_strings if name not in hidden]


class CanonicalFormatter(argparse.HelpFormatter):
    """``--help`` listing each flag under the names in use only (``canonical``), written as
    argparse writes an option's names (``--a N, --b N``; a switch's without a value)."""

    def _format_action_invocation(self, action: argparse.Action) -> str:
        if not isinstance(action, DeprecatedNames):
            return super()._format_action_invocation(action)
        if action.nargs == 0:
            return ", ".join(canonical(action))
        value = self._format_args(action, self._get_default_metavar_for_optional(action))
        return ", ".join(f"{name} {value}" for name in canonical(action))
