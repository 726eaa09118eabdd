"""``deploy up`` reads every job's flags with the job's own parser before launching anything
(``--dry-run`` included), and links the replicas' LoRA limits to the trainer's recipe."""

from __future__ import annotations

import io
import json
import re
import shlex
import tomllib
from pathlib import Path
from typing import Any

import pytest
from packaging.requirements import Requirement

from deploy.cli import Runtime, main
from deploy.install import TESTED_TRL, source_root
from replica_entry.vllm_backend import build_parser, options_from_args, split_passthrough
from tests.support.clock import SteppingClock
from tests.support.docs import deploy_commands

UP = ("up", "--bucket", "team/rl", "--model", "Qwen/Qwen2.5-Math-1.5B", "--replica-count", "2")
ROOT = source_root() or Path()


def _up(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    runtime = Runtime(clock=SteppingClock(), token=lambda: None, out=out, err=err)
    words = 2 if argv[0] == "fleet" else 1  # `fleet up`: the flags come after both words
    code = main([*argv[:words], "--hub-endpoint", "http://127.0.0.1:9", *argv[words:]], runtime)
    return code, out.getvalue(), err.getvalue()


def _specs(*argv: str) -> list[dict[str, Any]]:
    code, out, err = _up(*UP, "--dry-run", *argv)
    assert code == 0, err
    specs: list[dict[str, Any]] = json.loads(out)
    return specs


def _replica_options(spec: dict[str, Any]) -> Any:
    words = shlex.split(spec["command"][-1])
    own, extra = split_passthrough(words[words.index("--backend") :])
    parser = build_parser()
    environ = {**spec["env"], **dict.fromkeys(spec["secrets"], "<secret>")}  # what the job has
    return options_from_args(parser.parse_args(own), extra, parser, environ)


@pytest.mark.parametrize(
    ("trainer", "message"),
    [
        # The README's example before this check: the trainer job exited 2 on its first line.
        (["--max-steps", "500"], "the following arguments are required: --dataset"),
        (["--dataset", "d", "--bogus-flag", "7"], "unrecognized arguments: --bogus-flag 7"),
        (["--dataset", "d", "--lora-rank", "0"], "argument --lora-rank: must be >= 1"),
        (["--dataset", "d", "--rewards", "nope"], "argument --rewards: choose from"),
        (["--dataset", "d", "--help"], "--help is not a flag of a job"),
    ],
)
def test_a_trainer_flag_the_job_would_refuse_stops_up_before_anything(
    trainer: list[str], message: str
) -> None:
    code, out, err = _up(*UP, "--dry-run", "--", *trainer)
    assert code == 2
    assert out == ""  # no plan printed, nothing launched (the endpoint answers nothing)
    assert err.startswith("error: the trainer job would refuse its flags: ")
    assert message in err
    assert "Traceback" not in err and err.count("\n") == 1


def test_a_help_flag_after_the_separator_prints_nothing_of_the_trainer(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, _ = _up(*UP, "--dry-run", "--", "--dataset", "d", "--help")
    assert (code, out) == (2, "")
    assert capsys.readouterr().out == ""  # argparse prints help to sys.stdout itself


def test_the_output_dir_is_deploys_own() -> None:
    """TRL's adapters must land in the run's folder, whose .vllm_lora the proxies watch."""
    code, out, err = _up(*UP, "--dry-run", "--", "--dataset", "d", "--output-dir", "/tmp/x")
    assert (code, out) == (2, "")
    assert "argument --output-dir: deploy writes it (/lora/rollout-" in err
    assert "drop --output-dir /tmp/x from the flags after --" in err


def test_a_replica_flag_the_job_would_refuse_stops_up() -> None:
    code, out, err = _up(
        *UP, "--dry-run", "--replica-args", "--max-lora-rank 7", "--", "--dataset", "d"
    )
    assert (code, out) == (2, "")
    assert (
        "the replica jobs would refuse their flags: argument --max-lora-rank: vLLM supports" in err
    )


def test_the_replicas_hold_the_trainers_rank_and_window() -> None:
    specs = _specs("--", "--dataset", "d", "--lora-rank", "16", "--max-staleness", "8")
    replicas = [spec for spec in specs if spec["role"] == "replica"]
    assert len(replicas) == 2
    for spec in replicas:
        options = _replica_options(spec)
        assert options.max_lora_rank == 16
        assert options.effective_max_loras == 10  # the window of 8, plus the one loading
    # A rank vLLM does not serve as such gets the next one that holds it.
    (first, *_) = _specs("--", "--dataset", "d", "--lora-rank", "12")
    assert _replica_options(first).max_lora_rank == 16
    # The published recipe's defaults: rank 1, a window of 4.
    default = _replica_options(_specs("--", "--dataset", "d")[0])
    assert (default.max_lora_rank, default.effective_max_loras) == (1, 6)


def test_replica_args_may_raise_the_limits_but_not_below_the_trainer() -> None:
    raised = _specs("--replica-args", "--max-lora-rank 64 --max-loras 12", "--", "--dataset", "d")
    options = _replica_options(raised[0])
    assert (options.max_lora_rank, options.effective_max_loras) == (64, 12)

    code, _, err = _up(
        *UP, "--dry-run", "--replica-args", "--max-lora-rank 8", "--", "--dataset", "d",
        "--lora-rank", "16",
    )  # fmt: skip
    assert code == 2
    assert "--max-lora-rank 8, below the trainer's --lora-rank 16" in err
    code, _, err = _up(
        *UP, "--dry-run", "--replica-args", "--max-loras 5", "--", "--dataset", "d",
        "--max-staleness", "6",
    )  # fmt: skip
    assert code == 2
    assert "argument --max-loras: must exceed --max-staleness (6)" in err  # replica_entry's
    code, _, err = _up(
        *UP, "--dry-run", "--replica-args", "--max-staleness 2", "--", "--dataset", "d",
        "--max-staleness", "6",
    )  # fmt: skip
    assert code == 2
    assert "the replicas hold 4 adapters (--max-loras), not more than the trainer's " in err
    code, _, err = _up(*UP, "--dry-run", "--", "--dataset", "d", "--lora-rank", "1024")
    assert code == 2
    assert "argument --lora-rank: vLLM serves LoRA ranks up to 512 (got 1024)" in err


def test_the_job_topology_token_variable_is_the_jobs_not_this_machines(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``--proxy-token-env HF_TOKEN`` names the job's secret; here there may be none."""
    monkeypatch.delenv("HF_TOKEN", raising=False)
    specs = _specs("--topology", "job", "--network", "public", "--", "--dataset", "d")
    assert "--proxy-token-env HF_TOKEN" in specs[-1]["command"][-1]


def _pip_requirements(script: str) -> list[str]:
    """Every requirement a job's command asks pip for (paths and flags aside)."""
    found = []
    for step in re.split(r"&&|\|\||\(|\)", script):
        words = shlex.split(step) if "pip install" in step else []
        args = words[words.index("install") + 1 :] if words else []
        skip = False
        for word in args:
            if skip or word.startswith("-"):
                skip = word in ("-c",)
                continue
            found.append(word)
    return found


@pytest.mark.parametrize("code", ["pypi", "wheel"])
@pytest.mark.parametrize("topology", ["sidecar", "job"])
def test_every_requirement_a_job_installs_is_one_pip_accepts(code: str, topology: str) -> None:
    specs = _specs("--code", code, "--topology", topology, "--", "--dataset", "d")
    for spec in specs:
        requirements = _pip_requirements(spec["command"][-1])
        assert requirements, spec["role"]
        for text in requirements:
            if text.startswith("/"):
                assert text.endswith(".whl"), text
            else:
                Requirement(text)  # raises InvalidRequirement as pip would refuse it
    trainer = specs[-1]["command"][-1]
    assert f"'trl[kernels]=={TESTED_TRL}'" in trainer


def test_the_trainer_installs_the_trl_the_e2e_tier_tests() -> None:
    with (ROOT / "pyproject.toml").open("rb") as handle:
        extras = tomllib.load(handle)["project"]["optional-dependencies"]
    assert f"trl=={TESTED_TRL}" in extras["e2e-cpu"]
    (declared,) = [spec for spec in extras["trainer"] if spec.startswith("trl")]
    assert Requirement(declared).specifier.contains(TESTED_TRL)


def test_every_deploy_up_in_the_docs_passes_its_dry_run() -> None:
    commands = [("up", argv) for argv in deploy_commands("up")]
    commands += [("rehearse", argv) for argv in deploy_commands("rehearse")]
    fleets = [("fleet", argv) for argv in deploy_commands("fleet") if argv[0] == "up"]
    assert commands and fleets, "the docs show no `python -m deploy up` or `fleet up`"
    for subcommand, argv in [*commands, *fleets]:
        split = argv.index("--") if "--" in argv else len(argv)
        code, out, err = _up(subcommand, *argv[:split], "--dry-run", *argv[split:])
        assert code == 0, (argv, err)
        assert json.loads(out)
