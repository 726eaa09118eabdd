"""The generated reference pages hold what the code holds, and build in the core venv: every flag
of every parser (with the proxy's variables), every metric family an idle proxy exports, every
error answer, every alert; and the mirror points links written for GitHub at the site's copies."""

from __future__ import annotations

import subprocess
import sys

import pytest

from docsgen import cli_pages, error_pages, metric_pages, mirror, monitoring_pages, parsers
from proxy.config import env_name, flat_fields
from proxy.config.deprecated import canonical
from proxy.http.errors import ANSWERS

HEAVY = ("torch", "vllm", "trl", "peft", "transformers", "datasets")


def _page(title: str) -> str:
    (page,) = [p for p in cli_pages.PAGES if p.title == title]
    return cli_pages.render(page)


def test_every_flag_of_every_program_is_on_its_page() -> None:
    for page in cli_pages.PAGES:
        text = cli_pages.render(page)
        for _, which in page.sections:
            parser = cli_pages.build(which)
            todo = [parser]
            while todo:
                current = todo.pop()
                todo += parsers.subcommands(current).values()
                for action in parsers.options(current):  # a deprecated name is left out
                    for flag in canonical(action):
                        assert f"`{flag}`" in text, (page.title, current.prog, flag)


def test_the_proxy_page_gives_each_setting_its_variable_and_default() -> None:
    text = _page("rollout-proxy")
    for name in flat_fields():
        flag = "--" + name.replace("_", "-")
        (row,) = [line for line in text.splitlines() if line.startswith(f"| `{flag}`")]
        assert f"`{env_name(name)}`" in row, row
    (port,) = [line for line in text.splitlines() if line.startswith("| `--port`")]
    assert "| `8000` |" in port


def test_a_default_read_from_the_environment_never_reaches_the_page(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("VLLM_API_KEY", "secret-key-value")
    monkeypatch.setenv("HF_ENDPOINT", "https://secret.example")
    text = _page("rollout-replica") + _page("rollout-deploy")
    assert "secret-key-value" not in text and "secret.example" not in text
    assert "`VLLM_API_KEY`" in text  # the variable is named, its value is not


def test_every_exported_family_is_on_the_metrics_page() -> None:
    rows = metric_pages.families()
    names = {row.name for row in rows}
    assert len(rows) > 40 and all(name.startswith("rollout_proxy_") for name in names)
    text = metric_pages.render()
    assert all(f"`{name}`" in text for name in names)
    by_name = {row.name: row for row in rows}
    assert by_name["rollout_proxy_requests_total"].labels == ("route", "status")
    assert by_name["rollout_proxy_replica_errors_total"].labels == ("replica", "kind")
    assert by_name["rollout_proxy_run_advice"].labels == ("run", "verdict")


def test_every_error_answer_and_alert_is_listed() -> None:
    text = error_pages.render()
    for kind, answer in ANSWERS.items():
        where = f" | `{kind.__module__}.{kind.__name__}` | "
        (row,) = [line for line in text.splitlines() if where in line]
        status, _, reason, closes, retry = (c.strip() for c in row.strip("| ").split(" | ")[:5])
        assert status.split()[0] == str(answer.status), row
        assert reason.startswith("`") or reason == "the error's own", row
        assert (closes, retry) == (
            "yes" if answer.closes else "no",
            "yes" if answer.retry else "no",
        )
        assert row.endswith(f" | {cli_pages.cell(answer.remedy)} |"), row
    assert "argument --replica-urls: give at least one URL" in text  # a message of the trainer
    monitoring = monitoring_pages.render()
    for rule in monitoring_pages.alerts():
        assert f"`{rule['alert']}`" in monitoring


def test_the_pages_are_made_without_the_heavy_packages() -> None:
    code = (
        "import sys; from docsgen import hooks; hooks.generated_pages(); "
        f"print(sorted(m for m in sys.modules if m.split('.')[0] in {HEAVY!r}))"
    )
    shown = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert shown.stdout.strip() == "[]"


def test_links_written_for_github_point_at_the_sites_copies() -> None:
    page = (
        "See [security](../SECURITY.md), [a figure](../benchmarks/results/learn_reward.png), "
        "[a page](proxy/api.md#admin-api) and `[code](../not-a-link.md)`.\n"
        "```\n[in a block](../README.md)\n```\n"
    )
    rewritten = mirror.rewrite(page, "docs/operations.md")
    assert "[security](SECURITY.md)" in rewritten
    assert "[a figure](benchmarks/results/learn_reward.png)" in rewritten
    assert "[a page](proxy/api.md#admin-api)" in rewritten
    assert "`[code](../not-a-link.md)`" in rewritten and "[in a block](../README.md)" in rewritten
    deeper = mirror.rewrite("[s](../../SECURITY.md) [r](../../README.md)", "docs/proxy/runs.md")
    assert deeper == "[s](../SECURITY.md) [r](../index.md)"
    home = mirror.rewrite("[t](docs/trainer.md) [l](LICENSE)", "README.md")
    assert home == "[t](trainer.md) [l](LICENSE)"


def test_the_mirror_follows_the_links_of_what_it_mirrors() -> None:
    pages = {"docs/figures.md": "[b](../benchmarks/README.md)"}
    found = mirror.wanted(pages, ["SECURITY.md"], mirror.tracked())
    assert {"benchmarks/README.md", "benchmarks/fleet/README.md", "SECURITY.md"} <= found
    assert mirror.HOME not in found
