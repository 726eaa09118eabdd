"""Every name deprecated for meaning something else elsewhere: it still works this release, each
use says so in one line naming the name to use (and why), ``--help`` and the reference leave it
out, and the release it names refuses it. Found by ``test_vocabulary``'s walk of every parser;
listed here one by one."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from docsgen.cli_pages import generic_row, proxy_row
from proxy import __version__
from proxy.cli import load_settings
from proxy.config.deprecated import REFUSED_FROM, DeprecatedNames
from proxy.config.settings import DEPRECATED
from tests.support.programs import PARSERS, every_parser, tool_parsers, walk

DEPLOY_UP = ["up", "--bucket", "team/rl", "--model", "m"]
# (program, the arguments around it, the deprecated name, the name to use, a value, what the
# deprecated name means elsewhere, as the line says it)
CASES = [
    ("rollout-proxy", [], "--replicas", "--replica-urls", "http://a:1", "a count of replica jobs"),
    ("python -m benchmarks", ["overhead"], "--replicas", "--replica-urls", "http://a:1",
     "a count of replica jobs in rollout-deploy"),
    ("rollout-deploy", DEPLOY_UP, "--replicas", "--replica-count", "3",
     "a list of replica URLs in rollout-proxy"),
    ("rollout-deploy", ["fleet", "up", "--fleet", "f1", *DEPLOY_UP[1:]], "--replicas",
     "--replica-count", "3", "a list of replica URLs in rollout-proxy"),
    ("python -m benchmarks fleet", [], "--runs", "--run-count", "2", "names the runs"),
    ("python -m benchmarks fleet", [], "--model", "--model-shape", "qwen2.5-7b",
     "a Hub id or a folder"),
    ("python -m benchmarks fleet", [], "--max-inflight", "--max-inflight-tasks", "64",
     "the proxy's in-flight cap"),
    ("rollout-replica", ["--backend", "sim"], "--model", "--served-model-name", "m",
     "the Hub id or folder vLLM loads with --backend vllm"),
    ("rollout-replica --backend vllm", ["--backend", "vllm", "--model", "m"], "--install",
     "--vllm-build", "vllm", "it installs nothing"),
]  # fmt: skip
TOOL_CASES = [
    ("python -m benchmarks.demo", "--replicas", "--replica-count", "2"),
    ("python -m benchmarks.micro.policy", "--replicas", "--replica-count", "2"),
]


def _parsed(
    parser: argparse.ArgumentParser, argv: list[str], capsys: pytest.CaptureFixture[str]
) -> tuple[dict[str, object], str]:
    parsed = vars(parser.parse_args(argv))
    return parsed, capsys.readouterr().err


@pytest.mark.parametrize(("program", "around", "old", "new", "value", "why"), CASES)
def test_a_deprecated_name_works_and_says_the_name_to_use_in_one_line(
    program: str,
    around: list[str],
    old: str,
    new: str,
    value: str,
    why: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    before, said = _parsed(PARSERS[program](), [*around, old, value], capsys)
    after, silent = _parsed(PARSERS[program](), [*around, new, value], capsys)
    assert before == after and silent == ""
    (line,) = said.splitlines()
    assert re.fullmatch(
        rf"{re.escape(program)}.*: {old} is deprecated \(.*{re.escape(why)}.*\): use {new}; "
        rf"release {REFUSED_FROM} refuses it",
        line,
    ), line


@pytest.mark.parametrize(("module", "old", "new", "value"), TOOL_CASES)
def test_a_tools_deprecated_name_works_and_says_so(
    module: str, old: str, new: str, value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    (parser,) = [p for p in tool_parsers() if p.prog == module]
    before, said = _parsed(parser, [old, value], capsys)
    assert before == _parsed(parser, [new, value], capsys)[0]
    assert f"{old} is deprecated (--replicas is a list of replica URLs in rollout-proxy): " in said
    assert f"use {new};" in said


def test_help_and_the_reference_show_only_the_names_in_use() -> None:
    for parser in [*every_parser(), *tool_parsers()]:
        text = parser.format_help()
        for action in parser._actions:
            if isinstance(action, DeprecatedNames):
                for old in action.deprecated:
                    assert not re.search(rf"{old}\b(?!-)", text), (parser.prog, old)
                row = (proxy_row if parser.prog == "rollout-proxy" else generic_row)(parser, action)
                assert set(row.flags).isdisjoint(action.deprecated), (parser.prog, row.flags)


def test_the_proxys_deprecated_variable_and_file_key_say_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("PROXY_REPLICAS", "http://a:1")
    assert load_settings([]).replica_urls == ["http://a:1"]
    assert capsys.readouterr().err == (
        "rollout-proxy: PROXY_REPLICAS is deprecated (--replicas is a count of replica jobs in "
        f"rollout-deploy): use PROXY_REPLICA_URLS; release {REFUSED_FROM} refuses it\n"
    )
    monkeypatch.delenv("PROXY_REPLICAS")
    config = tmp_path / "proxy.toml"
    config.write_text('replicas = ["http://c:3"]\n')
    assert load_settings(["--config", str(config)]).replica_urls == ["http://c:3"]
    assert capsys.readouterr().err.startswith(
        f"rollout-proxy: replicas in {config} is deprecated (--replicas is a count"
    )
    config.write_text('replica_urls = ["http://c:3"]\n')
    load_settings(["--config", str(config)])
    assert capsys.readouterr().err == ""


def test_the_release_that_refuses_them_has_none_left() -> None:
    """Once the version reaches ``REFUSED_FROM``, a deprecated name left in place fails here:
    take it out of its flag (and out of ``settings.DEPRECATED``), so it is refused."""
    left = [
        name
        for build in PARSERS.values()
        for parser in walk(build())
        for action in parser._actions
        if isinstance(action, DeprecatedNames)
        for name in action.deprecated
    ] + list(DEPRECATED)
    assert left, "none is deprecated: remove this test and REFUSED_FROM"
    if _release(__version__) >= _release(REFUSED_FROM):
        pytest.fail(f"version {__version__} refuses {sorted(set(left))}: remove them")


def _release(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", version)[:3])
