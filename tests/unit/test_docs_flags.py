"""The flag table of docs/proxy/configuration.md against ``rollout-proxy --help``: every flag it
names exists, and the default it gives is the one ``--help`` shows (both read off the settings'
fields), so the hand-written table cannot drift from what the proxy does (the reference page,
docs/reference/rollout-proxy.md, is generated from the settings themselves)."""

from __future__ import annotations

import re

from proxy.config import build_parser
from tests.support.docs import section

_SHOWN = re.compile(r"\(default: (.*?)\) \[env ")


def _help_defaults() -> dict[str, str]:
    """Each flag of ``rollout-proxy`` -> the default its help line shows."""
    shown = {}
    for action in build_parser()._actions:
        found = _SHOWN.search(action.help or "")
        for flag in action.option_strings:
            if found:
                shown[flag] = found[1].replace("%%", "%")
    return shown


def _rows() -> list[tuple[list[str], str]]:
    """(flags, default cell) of each row of the Configuration section's flag table."""
    rows = []
    for line in section("docs/proxy/configuration.md", "The main flags").splitlines():
        if line.startswith("| `--"):
            cells = [cell.strip() for cell in line.split("|")[1:-1]]
            rows.append((re.findall(r"`(--[a-z0-9-]+)", cells[0]), cells[1]))
    return rows


def test_every_flag_in_the_table_exists_with_the_default_its_help_shows() -> None:
    shown = _help_defaults()
    rows = _rows()
    assert len(rows) > 30, "the walk found no flag table"
    for flags, cell in rows:
        for flag in flags:
            assert flag in shown, f"the docs name {flag}: rollout-proxy has no such flag"
        named = [flag for flag in flags if not flag.startswith("--no-")]  # a switch's other half
        given = [cell] if len(named) == 1 else re.split(r",\s*", cell)
        if len(given) == 1:
            given *= len(named)  # one default for every flag of the row
        assert len(given) == len(named), f"{flags}: {cell!r} gives no default per flag"
        for flag, default in zip(named, given, strict=True):
            assert default.replace("`", "") == shown[flag], f"{flag}: the docs say {default!r}"
