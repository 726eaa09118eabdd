"""Reference pages of the command lines: every flag of every program, from its parser.

One table per parser (per argument group where it has titled groups), a row per flag: its
spellings in use (a deprecated one is left out, as ``--help`` leaves it: ``proxy.config.
deprecated``), the value it takes, its default as ``--help`` shows it and its environment variable.
``rollout-proxy``'s rows come from the settings' fields (``proxy.config``: the description, the
default as the flag shows it, ``PROXY_<NAME>``), so an alias a flag gains is listed beside it.
The other programs' rows come from each flag's help as the program's own formatter writes it
(``--help``'s line for that flag, whatever formatter class the program uses): the default it
states (``(default: X)``, ``(required)``) else the parsed default, and the variables it names
(``[env NAME]``, ``$NAME``). The parsers are built with an empty environment, so a default read
from the builder's environment (``HF_ENDPOINT``, a key) never reaches the page.
"""

from __future__ import annotations

import argparse
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from unittest import mock

from docsgen import parsers
from proxy.config.deprecated import canonical

_DEFAULT_IN_HELP = re.compile(
    r"\s*\((?:default:?|default is)\s+([^()]*(?:\([^()]*\)[^()]*)*)\)\s*$"
)
_ENV_IN_TEXT = re.compile(r"\$\{?([A-Z][A-Z0-9_]{2,})\b")
_ENV_TAG = re.compile(r"\s*\[env ([A-Z0-9_, ]+)\]")
_BUILD_ENV = {"PATH": os.defpath, "HOME": "/nonexistent"}
_CODE_SPAN = re.compile(r"(`+)(.+?)\1")


def cell(text: str) -> str:
    """``text`` safe inside a Markdown table cell (pipes, HTML-looking words, emphasis); a code
    span is left as written (Markdown shows its text literally: escaped, ``<run>`` would read
    ``&lt;run&gt;``)."""
    text = " ".join(text.split())
    out, at = [], 0
    for span in _CODE_SPAN.finditer(text):
        out += [_escaped(text[at : span.start()]), span.group(0)]
        at = span.end()
    return "".join([*out, _escaped(text[at:])])


def _escaped(text: str) -> str:
    return (
        text.replace("\\", "\\\\")
        .replace("|", "\\|")
        .replace("<", "&lt;")
        .replace(">", "&gt;")
        .replace("*", "\\*")
    )


def code(text: str) -> str:
    """``text`` as a code span (Python-Markdown's tables leave pipes inside one alone)."""
    ticks = "``" if "`" in text else "`"
    pad = " " if ticks == "``" else ""
    return f"{ticks}{pad}{text}{pad}{ticks}"


@dataclass(frozen=True)
class Row:
    flags: tuple[str, ...]
    value: str
    default: str
    env: tuple[str, ...]
    help: str

    def markdown(self) -> str:
        flags = ", ".join(code(flag) for flag in self.flags)
        value = code(self.value) if self.value else ""
        default = code(self.default) if self.default not in ("", "required") else self.default
        env = ", ".join(code(name) for name in self.env)
        return f"| {flags} | {value} | {default} | {env} | {cell(self.help)} |"


def _value(action: argparse.Action) -> str:
    if action.nargs == 0:
        return ""
    if action.metavar is not None:
        return str(action.metavar)
    if action.choices is not None:
        return "{" + ",".join(str(choice) for choice in action.choices) + "}"
    return action.dest.upper()


def _help_shown(parser: argparse.ArgumentParser, action: argparse.Action) -> str:
    """The action's help as the program's ``--help`` prints it: through the program's own
    formatter class (which may append the default), ``%(default)s`` and the like filled in."""
    if not action.help or action.help == argparse.SUPPRESS:
        return ""
    return " ".join(parser._get_formatter()._expand_help(action).split())


def _plain_default(action: argparse.Action) -> str:
    """The default of a flag whose help does not state it (a plain ``HelpFormatter``)."""
    if action.required:
        return "required"
    if isinstance(action, argparse._VersionAction | argparse._HelpAction):
        return ""
    default = action.default
    if default is None or default == [] or default == "" or default == argparse.SUPPRESS:
        return "none"
    if isinstance(default, bool):
        return "on" if default else "off"
    if isinstance(default, list | tuple):
        return ",".join(str(item) for item in default)
    return str(default)


def generic_row(parser: argparse.ArgumentParser, action: argparse.Action) -> Row:
    """A flag of an argparse program: the default and variable its ``--help`` line states
    (``(default: X)``, ``(required)``, ``[env NAME]``, ``$NAME``), else its parsed default."""
    text = _help_shown(parser, action)
    env = list(dict.fromkeys(_ENV_IN_TEXT.findall(text)))
    for tag in _ENV_TAG.finditer(text):
        env += [name.strip() for name in tag.group(1).split(",") if name.strip() not in env]
    text = _ENV_TAG.sub("", text)
    stated = _DEFAULT_IN_HELP.search(text)
    if stated is not None:
        default, text = stated.group(1).strip(), text[: stated.start()] + text[stated.end() :]
    elif text.endswith("(required)"):
        default, text = "required", text.removesuffix("(required)")
    else:
        default = _plain_default(action)
    return Row(tuple(canonical(action)), _value(action), default, tuple(env), text.strip())


def proxy_row(parser: argparse.ArgumentParser, action: argparse.Action) -> Row:
    """A flag of ``rollout-proxy``: the setting's own description, default and variable."""
    from proxy.config import env_name, field_of, flat_fields
    from proxy.config.flags import default

    if action.dest not in flat_fields():
        return generic_row(parser, action)
    info = field_of(action.dest)
    value = "" if action.nargs == 0 else str(action.metavar or "")
    return Row(
        tuple(canonical(action)),
        value,
        default(info),
        (env_name(action.dest),),
        info.description or "",
    )


HEADER = "| flag | value | default | environment | what it does |\n|---|---|---|---|---|"


def table(parser: argparse.ArgumentParser, proxy: bool = False) -> str:
    """The parser's flags as one table, grouped by its titled argument groups."""
    rows = [(proxy_row if proxy else generic_row)(parser, a) for a in parsers.options(parser)]
    return "\n".join([HEADER, *(row.markdown() for row in rows)])


def grouped(parser: argparse.ArgumentParser, level: int) -> Iterator[str]:
    """A table per argument group (argparse's own first: positionals, options)."""
    groups = [g for g in parser._action_groups if any(a.option_strings for a in g._group_actions)]
    for group in groups:
        actions = [a for a in group._group_actions if a.option_strings]
        if len(groups) > 1 and group.title not in (None, "options", "optional arguments"):
            yield f"{'#' * level} {group.title[0].upper()}{group.title[1:]}\n"
        yield "\n".join([HEADER, *(generic_row(parser, a).markdown() for a in actions)]) + "\n"


def positionals(parser: argparse.ArgumentParser) -> str:
    found = [
        a
        for a in parser._actions
        if not a.option_strings and not isinstance(a, argparse._SubParsersAction)
    ]
    if not found:
        return ""
    lines = [
        f"- {code(str(a.metavar or a.dest))}: {cell(a.help or '')}".rstrip(": ") for a in found
    ]
    return "Positional arguments:\n\n" + "\n".join(lines) + "\n"


def usage(parser: argparse.ArgumentParser) -> str:
    text = parser.description or ""
    first = text.strip().split("\n\n")[0]
    return " ".join(first.split())


def section(
    title: str, parser: argparse.ArgumentParser, level: int = 2, proxy: bool = False
) -> Iterator[str]:
    yield f"{'#' * level} `{title}`\n"
    if described := usage(parser):
        yield cell(described).replace("\\*", "*") + "\n"
    if listed := positionals(parser):
        yield listed
    if proxy:
        yield table(parser, proxy=True) + "\n"
    else:
        yield from grouped(parser, level + 1)
    if parser.epilog:
        yield cell(parser.epilog) + "\n"
    for name, sub in parsers.subcommands(parser).items():
        yield from section(f"{title} {name}", sub, level + 1)


# Material's page boost (front matter ``search: boost``) for these pages: a search for a flag
# (``token budget``, ``token-budget``, ``shutdown timeout``) finds the page that defines it
# first, ahead of the pages that mention the flag in prose. Measured on this site's index with
# Material's own search worker: at 1 the trainer's reference came 4th for "token budget" and
# 5th for "token-budget" (behind the simulator); at 2 it tied for 3rd on "token-budget"; at 3
# it is 1st on both, and the pages whose title matches a query keep their place (a title match
# weighs 1000 times the text). tests/docs/test_site_offline.py checks the first three in Chromium.
SEARCH_BOOST = 3

# The right-hand table of contents is hidden on these pages (front matter ``hide: [toc]``): the
# flag tables take its width (at 1280 px: about 970 px instead of 720), so a flag and its
# variable each stay on one line (docsgen.hooks.mark_names) beside their description, and the
# tables fit without a sideways scroll; all but rollout-proxy's own, whose five columns of long
# names still scroll by about 150 px at 1280. The sections stay in the headings and in search.
FRONT_MATTER = f"---\nsearch:\n  boost: {SEARCH_BOOST}\nhide:\n  - toc\n---\n"

NOTE = (
    "Generated from the code when the site is built (`docsgen/cli_pages.py`): every flag the "
    "program's parser knows, with the default its `--help` shows. Nothing here is written by "
    "hand."
)


@dataclass(frozen=True)
class Page:
    path: str
    title: str
    intro: str
    sections: tuple[tuple[str, str], ...]  # (the command as typed, the parsers' function)


PAGES = (
    Page(
        "reference/rollout-proxy.md",
        "rollout-proxy",
        "Every flag is also an environment variable (`PROXY_<NAME>`) and a key of the file "
        "`--config` names (the flat name: the flag without `--`, `_` for `-`). A flag beats the "
        "variable, which beats the file.",
        (("rollout-proxy", "proxy_parser"), ("rollout-proxy top", "top_parser")),
    ),
    Page(
        "reference/rollout-replica.md",
        "rollout-replica",
        "`python -m replica_entry` is the same program. `--backend` chooses the parser: the "
        "simulated replica's or vLLM's.",
        (
            ("rollout-replica --backend sim", "sim_parser"),
            ("rollout-replica --backend vllm", "vllm_parser"),
        ),
    ),
    Page(
        "reference/rollout-trainer.md",
        "rollout-trainer",
        "`python -m trainer_entry` is the same program; `rollout-deploy up` checks the flags it "
        "passes after `--` with this parser. Two helpers make a local run's model and data.",
        (
            ("rollout-trainer", "trainer_parser"),
            ("python -m trainer_entry.tiny_model", "module:trainer_entry.tiny_model"),
            ("python -m trainer_entry.math_data", "module:trainer_entry.math_data"),
        ),
    ),
    Page(
        "reference/rollout-deploy.md",
        "rollout-deploy",
        "`python -m deploy` is the same program. `up` and `rehearse` pass the flags after `--` "
        "to the trainer ([rollout-trainer](rollout-trainer.md)).",
        (("rollout-deploy", "deploy_parser"),),
    ),
    Page(
        "reference/benchmarks.md",
        "python -m benchmarks",
        "The benchmark suites and the demo (`make demo`, `make bench`).",
        (
            ("python -m benchmarks", "benchmarks_parser"),
            ("python -m benchmarks fleet", "fleet_parser"),
            ("python -m benchmarks learn", "learn_parser"),
            ("python -m benchmarks.demo", "module:benchmarks.demo"),
        ),
    ),
)


def build(which: str) -> argparse.ArgumentParser:
    """A parser by its ``PAGES`` name, built with an empty environment."""
    with mock.patch.dict(os.environ, _BUILD_ENV, clear=True):
        if which.startswith("module:"):
            return parsers.module_parser(which.removeprefix("module:"))
        made: argparse.ArgumentParser = getattr(parsers, which)()
        return made


def render(page: Page) -> str:
    parts = [
        FRONT_MATTER,
        f"# {page.title}\n",
        f"{page.intro}\n",
        f"!!! note\n    {NOTE}\n",
    ]
    for title, which in page.sections:
        parts.extend(section(title, build(which), proxy=which == "proxy_parser"))
    return "\n".join(parts)
