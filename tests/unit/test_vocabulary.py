"""One name per concept across the five programs: a list of replica URLs is ``--replica-urls``
everywhere, a count of replicas ``--replica-count`` (or ``--max-replica-count``, ...), and a flag
name means the same kind of value in every program that has it. The earlier spellings, which
scripts and tools use, keep working as aliases (flags, and the proxy's ``PROXY_*`` variables and
file keys) and parse to the same setting; help names the new one first. ``rollout-replica``
lists every backend, whichever is installed."""

from __future__ import annotations

import argparse
from collections import defaultdict
from pathlib import Path

import pytest

from proxy.cli import load_settings
from proxy.config import Settings, accepted_names
from proxy.config.units import DurationArg, SizeArg
from replica_entry import cli as replica_cli
from tests.support.programs import PARSERS, every_parser, options, walk
from trainer_entry.sidecar import child_environment, relay_command, sidecar_command

TRAINER = ["--model", "m", "--dataset", "d.jsonl", "--output-dir", "out"]
DEPLOY_UP = ["up", "--bucket", "team/rl", "--model", "m"]
FLEET_UP = ["fleet", "up", "--fleet", "f1", "--bucket", "team/rl", "--model", "m"]
URLS = "http://a:1,http://b:2"

# (program, the arguments around the flag, the earlier name, the name now, a value)
RENAMED = [
    ("rollout-proxy", [], "--replicas", "--replica-urls", URLS),
    ("rollout-proxy", [], "--adapter-store-max-adapter-bytes", "--adapter-max-bytes", "1GiB"),
    ("rollout-trainer", TRAINER, "--sidecar-replicas", "--replica-urls", URLS),
    ("rollout-trainer", TRAINER, "--sidecar-discover", "--discover", "dns:grp-replica:8000"),
    ("rollout-trainer", [*TRAINER, "--replica-urls", URLS], "--server-timeout", "--ready-timeout",
     "5m"),
    ("rollout-deploy", DEPLOY_UP, "--replicas", "--replica-count", "3"),
    ("rollout-deploy", FLEET_UP, "--replicas", "--replica-count", "3"),
    ("python -m benchmarks", ["overhead"], "--replicas", "--replica-urls", URLS),
    ("python -m benchmarks fleet", [], "--max-replicas", "--max-replica-count", "4"),
    ("python -m benchmarks fleet", [], "--study-replicas", "--study-replica-count", "4"),
    ("python -m benchmarks fleet", [], "--shared-replicas", "--shared-replica-count", "4"),
    ("python -m benchmarks fleet", [], "--separate-replicas", "--separate-replica-count", "4"),
    ("python -m benchmarks fleet", [], "--runs", "--run-count", "4"),
    ("python -m benchmarks fleet", [], "--share-runs", "--share-run-count", "4"),
    ("python -m benchmarks learn", [], "--work", "--workdir", "/var/tmp/w"),
    ("rollout-proxy top", [], "--token-env", "--proxy-token-env", "MY_TOKEN"),
]  # fmt: skip
# The earlier names that still mean two things (each an alias; no program's own name does).
KEPT_AMBIGUOUS = {"--replicas", "--runs"}


def _kind(action: argparse.Action) -> str:
    """The kind of value a flag takes, read off argparse's type or the proxy's metavar."""
    if action.nargs == 0:
        return "switch"
    if isinstance(action.type, DurationArg) or action.metavar == "SECONDS":
        return "duration"
    if isinstance(action.type, SizeArg) or action.metavar == "BYTES":
        return "size"
    if action.type is int or action.metavar == "N":
        return "int"
    if action.type is float or action.metavar in ("NUMBER", "FRACTION"):
        return "number"
    return "text"


@pytest.mark.parametrize(("program", "around", "old", "new", "value"), RENAMED)
def test_an_earlier_name_parses_to_the_same_setting_as_the_name_now(
    program: str, around: list[str], old: str, new: str, value: str
) -> None:
    parser = PARSERS[program]()
    before = vars(parser.parse_args([*around, old, value]))
    after = vars(parser.parse_args([*around, new, value]))
    assert before == after
    parsers = walk(PARSERS[program]())
    action = next(a for p in parsers for a in p._actions if new in a.option_strings)
    assert action.option_strings[0] == new and old in action.option_strings  # new name first
    assert after[action.dest] not in (None, [], "")


def test_a_flag_name_means_one_kind_of_value_in_every_program() -> None:
    """``--replicas`` was a URL list in the proxy and a count in deploy: no name now in use
    (an option's first string) takes two kinds of value, and of the earlier names only the
    two kept for old scripts do."""
    own: dict[str, set[str]] = defaultdict(set)
    every: dict[str, set[str]] = defaultdict(set)
    for parser in every_parser():
        for action in options(parser):
            own[action.option_strings[0]].add(_kind(action))
            for flag in action.option_strings:
                every[flag].add(_kind(action))
    assert {flag for flag, kinds in own.items() if len(kinds) > 1} == set()
    assert {flag for flag, kinds in every.items() if len(kinds) > 1} == KEPT_AMBIGUOUS
    assert own["--replica-urls"] == {"text"} and own["--replica-count"] == {"int"}
    bare = [flag for flag in own if flag == "--replicas" or flag.endswith("-replicas")]
    assert bare == [], "a count is -replica-count, a list -replica-urls"


def test_the_programs_start_each_other_with_the_names_now(tmp_path: Path) -> None:
    sidecar = sidecar_command(["http://a:1"], 9000, tmp_path)
    assert "--replica-urls" in sidecar and "--replicas" not in sidecar
    relay = relay_command("http://remote:8000", 9001)
    assert relay[relay.index("--replica-urls") + 1] == "http://remote:8000"


def test_the_proxy_takes_the_earlier_names_as_variables_and_file_keys(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PROXY_REPLICAS", "http://a:1")
    assert load_settings([]).replica_urls == ["http://a:1"]
    assert load_settings(["--replica-urls", "http://b:2"]).replica_urls == ["http://b:2"]
    monkeypatch.delenv("PROXY_REPLICAS")
    config = tmp_path / "proxy.toml"
    config.write_text('replicas = ["http://c:3"]\nadapter_store_max_adapter_bytes = "2 MiB"\n')
    settings = load_settings(["--config", str(config)])
    assert settings.replica_urls == ["http://c:3"]
    assert settings.adapters.store_max_adapter_bytes == 2 << 20
    # An old name in the environment still wins over the new one in the file (precedence holds
    # whichever name a source used).
    monkeypatch.setenv("PROXY_REPLICAS", "http://a:1")
    config.write_text('replica_urls = ["http://c:3"]\n')
    assert load_settings(["--config", str(config)]).replica_urls == ["http://a:1"]
    # Settings built in code take either name too.
    assert Settings.model_validate({"replicas": ["http://d:4"]}).replica_urls == ["http://d:4"]


def test_both_names_in_one_source_are_refused_naming_both(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("PROXY_REPLICAS", "http://a:1")
    monkeypatch.setenv("PROXY_REPLICA_URLS", "http://b:2")
    with pytest.raises(SystemExit) as info:
        load_settings([])
    assert info.value.code == 2
    assert capsys.readouterr().err == (
        "rollout-proxy: PROXY_REPLICAS and PROXY_REPLICA_URLS are one setting (PROXY_REPLICAS is "
        "its earlier name): give PROXY_REPLICA_URLS only\n"
    )
    monkeypatch.delenv("PROXY_REPLICAS")
    monkeypatch.delenv("PROXY_REPLICA_URLS")
    config = tmp_path / "proxy.toml"
    config.write_text('replicas = ["http://a:1"]\nreplica_urls = ["http://b:2"]\n')
    with pytest.raises(SystemExit):
        load_settings(["--config", str(config)])
    assert "replicas and replica_urls are one setting" in capsys.readouterr().err


def test_a_bad_value_under_an_earlier_name_is_named_as_given(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("PROXY_REPLICAS", "ftp://a")
    with pytest.raises(SystemExit):
        load_settings([])
    assert capsys.readouterr().err.startswith("rollout-proxy: invalid setting PROXY_REPLICAS: ")
    monkeypatch.delenv("PROXY_REPLICAS")
    with pytest.raises(SystemExit):
        load_settings(["--replicas", "ftp://a"])
    err = capsys.readouterr().err
    assert err.startswith("rollout-proxy: invalid setting --replica-urls/--replicas ")


def test_a_trainers_sidecar_passes_the_earlier_variables_on() -> None:
    assert {"replicas", "replica_urls"} <= set(accepted_names())
    kept = child_environment({"PROXY_REPLICAS": "http://a:1", "PROXY_REPLICAZ": "x"}, {})
    assert kept == {"PROXY_REPLICAS": "http://a:1"}


def test_a_misspelled_backend_is_answered_with_every_backend(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``--backend vlm`` once answered "choose from 'sim'" (vLLM's parser is only reached by
    ``vllm``), hiding vllm; both parsers list every backend, whichever is installed."""
    with pytest.raises(SystemExit) as info:
        replica_cli.main(["--backend", "vlm"])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "argument --backend: invalid choice: 'vlm' (choose from 'sim', 'vllm')" in err
    for program in ("rollout-replica", "rollout-replica --backend vllm"):
        assert "--backend {sim,vllm}" in PARSERS[program]().format_usage()
