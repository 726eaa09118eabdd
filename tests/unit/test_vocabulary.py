"""One name per concept across the five programs: a list of replica URLs is ``--replica-urls``
everywhere, a count of replicas ``--replica-count`` (or ``--max-replica-count``, ...), and a flag
name means one thing in every program that has it. The earlier spellings, which scripts and tools
use, keep working as aliases (flags, and the proxy's ``PROXY_*`` variables and file keys) and
parse to the same setting; help names the new one first. An earlier name that means something
else elsewhere (``--replicas``, ``--runs``, ``--model``, ...) is deprecated: each use says so in
one line naming the name to use, help leaves it out, and release ``REFUSED_FROM`` refuses it
(``tests/unit/test_deprecated_names.py``). ``rollout-replica`` lists every backend, whichever is
installed."""

from __future__ import annotations

import argparse
from collections import defaultdict
from pathlib import Path

import pytest

from deploy.scale_flags import ReplicaCountArg
from proxy.cli import load_settings
from proxy.config import Settings, accepted_names
from proxy.config.deprecated import DeprecatedNames, canonical
from proxy.config.units import DurationArg, SizeArg
from replica_entry import cli as replica_cli
from tests.support.programs import PARSERS, every_parser, options, tool_parsers, walk
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
    ("python -m benchmarks fleet", [], "--model", "--model-shape", "qwen2.5-7b"),
    ("python -m benchmarks fleet", [], "--max-inflight", "--max-inflight-tasks", "64"),
    ("rollout-replica", ["--backend", "sim"], "--model", "--served-model-name", "m"),
    ("rollout-replica --backend vllm", ["--backend", "vllm", "--model", "m"], "--install",
     "--vllm-build", "vllm"),
    ("python -m benchmarks learn", [], "--work", "--workdir", "/var/tmp/w"),
    ("rollout-proxy top", [], "--token-env", "--proxy-token-env", "MY_TOKEN"),
]  # fmt: skip
# The earlier names that mean two things across the programs: each deprecated wherever it is
# not the flag's own name (proxy.config.deprecated).
TWO_MEANINGS = {"--replicas", "--runs", "--model", "--max-inflight"}


def _kind(action: argparse.Action) -> str:
    """The kind of value a flag takes, read off argparse's type or choices, or the proxy's
    metavar."""
    if action.nargs == 0:
        return "switch"
    if action.choices is not None:
        return "one of " + ",".join(sorted(str(choice) for choice in action.choices))
    if isinstance(action.type, DurationArg) or action.metavar == "SECONDS":
        return "duration"
    if isinstance(action.type, SizeArg) or action.metavar == "BYTES":
        return "size"
    # deploy's --replica-count takes a count or a range of counts (MIN..MAX: the scaler on).
    if action.type is int or action.metavar == "N" or isinstance(action.type, ReplicaCountArg):
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


def _own_name(action: argparse.Action) -> str:
    """A flag's first name; a switch's positive one (deploy's ``--no-adapter-push`` turns off
    what the proxy's ``--adapter-push`` turns on)."""
    own = action.option_strings[0]
    if action.nargs == 0 and action.const is False and own.startswith("--no-"):
        return "--" + own.removeprefix("--no-")
    return own


def _meanings(deprecated: bool) -> dict[str, set[tuple[str, str]]]:
    """Flag name -> (the flag's own name, the kind of value) of every flag that has it, in every
    parser of the programs and their tools; ``deprecated``: deprecated names counted too."""
    found: dict[str, set[tuple[str, str]]] = defaultdict(set)
    for parser in [*every_parser(), *tool_parsers()]:
        for action in options(parser):
            meaning = (_own_name(action), _kind(action))
            for flag in action.option_strings if deprecated else canonical(action):
                found[flag].add(meaning)
    return found


def test_a_flag_name_has_one_meaning_in_every_program() -> None:
    """``--replicas`` was a URL list in the proxy and a count in deploy, ``--model`` a Hub id, the
    name a simulated replica serves and a shape preset: walked over every parser, no name in use
    belongs to two flags (their own names differ) or takes two kinds of value."""
    two = {name: found for name, found in _meanings(deprecated=False).items() if len(found) > 1}
    assert two == {}
    own = _meanings(deprecated=False)
    assert own["--replica-urls"] == {("--replica-urls", "text")}
    assert own["--replica-count"] == {("--replica-count", "int")}
    firsts = {first for found in own.values() for first, _ in found}
    bare = [flag for flag in firsts if flag == "--replicas" or flag.endswith("-replicas")]
    assert bare == [], "a count is -replica-count, a list -replica-urls"


def test_a_name_with_two_meanings_is_deprecated_wherever_it_is_an_alias() -> None:
    """Counting the deprecated names, exactly ``TWO_MEANINGS`` have two meanings, and each is
    deprecated in every flag it does not name first."""
    every = _meanings(deprecated=True)
    assert {name for name, found in every.items() if len(found) > 1} == TWO_MEANINGS
    for parser in [*every_parser(), *tool_parsers()]:
        for action in options(parser):
            for name in set(action.option_strings[1:]) & TWO_MEANINGS:
                assert isinstance(action, DeprecatedNames), (parser.prog, name)
                assert name in action.deprecated, (parser.prog, name)


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
    deprecated, invalid = capsys.readouterr().err.splitlines()
    assert deprecated.startswith("rollout-proxy: --replicas is deprecated")
    assert invalid.startswith("rollout-proxy: invalid setting --replica-urls/--replicas ")


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
