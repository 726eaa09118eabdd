"""The trainer's inputs checked before anything starts (``trainer_entry.inputs``, with the shared
checks of ``replica_entry.startup``), and the sidecar's word on the replicas' token: a warning
only for replicas that are not on this machine's loopback. No sockets, no Hub."""

from __future__ import annotations

import logging
from dataclasses import replace
from pathlib import Path

import pytest

from proxy.config.paths import directory_problem
from replica_entry.startup import is_hub_id, model_problem
from trainer_entry import sidecar
from trainer_entry.inputs import (
    BadInput,
    check_hub,
    columns_problem,
    dataset_problem,
    first_prompt,
    hub_ids,
    template_problem,
)
from trainer_entry.options import Topology, TrainerOptions


@pytest.mark.parametrize(
    ("value", "hub"),
    [
        ("Qwen/Qwen2.5-Math-1.5B", True),
        ("gpt2", True),
        ("openai/gsm8k", True),
        ("./model", False),
        ("/abs/model", False),
        ("models/qwen/final", False),
        ("org/-bad", False),
        ("org/a..b", False),
        ("~/model", False),
    ],
)
def test_what_can_be_a_hub_id(value: str, hub: bool) -> None:
    assert is_hub_id(value) is hub


def test_a_model_is_a_model_directory_or_a_hub_id(tmp_path: Path) -> None:
    assert model_problem("--model", "Qwen/Qwen2.5-0.5B") is None
    assert model_problem("--model", str(tmp_path)) == (
        f"--model {tmp_path}: a directory without config.json, not a model's"
    )
    (tmp_path / "config.json").write_text("{}")
    assert model_problem("--model", str(tmp_path)) is None
    assert "a file; name the model's directory" in (
        model_problem("--model", str(tmp_path / "config.json")) or ""
    )
    assert "no such directory here, and not a Hub id" in (
        model_problem("--model", str(tmp_path / "gone")) or ""
    )


def test_a_dataset_file_the_trainer_reads_must_be_here(tmp_path: Path) -> None:
    assert "no such file here" in (dataset_problem("nothere.jsonl") or "")
    assert "no such file here" in (dataset_problem(str(tmp_path / "d.parquet")) or "")
    (tmp_path / "d.jsonl").write_text("{}\n")
    assert dataset_problem(str(tmp_path / "d.jsonl")) is None
    assert dataset_problem("openai/gsm8k") is None  # looked up on the Hub next
    assert dataset_problem(str(tmp_path)) is None  # a local folder datasets can load
    assert "not a Hub id" in (dataset_problem(str(tmp_path / "a" / "b.csv")) or "")


def test_a_directory_to_write_is_there_or_can_be_made(tmp_path: Path) -> None:
    assert directory_problem("--output-dir", tmp_path / "new" / "run") is None
    (tmp_path / "f").write_text("")
    assert directory_problem("--output-dir", tmp_path / "f" / "run") == (
        f"--output-dir {tmp_path / 'f' / 'run'}: {tmp_path / 'f'} is a file, not a directory"
    )


def test_a_response_template_is_a_family_or_a_file_here(tmp_path: Path) -> None:
    assert template_problem(None) is None and template_problem("chatml") is None
    (tmp_path / "t.json").write_text("{}")
    assert template_problem(str(tmp_path / "t.json")) is None
    assert "neither chatml nor llama3 nor a JSON file here" in (template_problem("x.json") or "")


def test_the_first_prompt_of_a_local_dataset(tmp_path: Path) -> None:
    data = tmp_path / "d.jsonl"
    data.write_text('\n{"question": "1+1?", "answer": "2"}\n{"question": "2+2?"}\n')
    assert first_prompt(str(data), "question") == "1+1?"
    assert first_prompt(str(data), "prompt") is None
    assert first_prompt("openai/gsm8k", "question") is None
    data.write_text("[1, 2]\n")
    with pytest.raises(BadInput, match="not a JSON object"):
        first_prompt(str(data), "prompt")


def test_a_local_dataset_has_the_columns_the_run_reads(tmp_path: Path) -> None:
    data = tmp_path / "d.jsonl"
    data.write_text('{"question": "1+1?", "answer": "2"}\n')
    plain = TrainerOptions(model="m", dataset=str(data), output_dir=tmp_path, topology=Topology())
    assert columns_problem(plain) == (
        f"--dataset {data}: no column 'prompt' (it has question, answer): name the prompt "
        "column with --prompt-column"
    )
    asked = replace(plain, prompt_column="question")
    assert columns_problem(asked) is None
    graded = replace(asked, answer_column="solution", rewards=("math", "format"))
    assert "no column 'solution', which the math reward reads" in (columns_problem(graded) or "")
    assert columns_problem(replace(graded, rewards=("format",))) is None  # reads no answer
    assert columns_problem(replace(plain, dataset="openai/gsm8k")) is None  # the Hub's: later


def _options(model: str, dataset: str, tmp_path: Path) -> TrainerOptions:
    return TrainerOptions(model=model, dataset=dataset, output_dir=tmp_path, topology=Topology())


def test_only_what_is_not_here_is_looked_up_on_the_hub(tmp_path: Path) -> None:
    (tmp_path / "d.jsonl").write_text("{}\n")
    local = _options(str(tmp_path), str(tmp_path / "d.jsonl"), tmp_path)
    assert hub_ids(local) == []
    assert check_hub(local, {}) == {}  # nothing to look up: no client is even made
    remote = _options("org/model", "org/data", tmp_path)
    assert hub_ids(remote) == [
        ("--model", "model", "org/model"),
        ("--dataset", "dataset", "org/data"),
    ]


def test_offline_the_hub_ids_must_be_in_the_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    options = _options("org/model", str(tmp_path / "d.jsonl"), tmp_path)
    (tmp_path / "d.jsonl").write_text("{}\n")
    with pytest.raises(BadInput, match="org/model: not in this machine's Hub cache"):
        check_hub(options, {"HF_HUB_OFFLINE": "1"})
    (tmp_path / "hub" / "models--org--model" / "snapshots").mkdir(parents=True)
    assert check_hub(options, {"HF_HUB_OFFLINE": "1"}) == {}


@pytest.mark.parametrize(
    ("replicas", "local"),
    [
        (("http://127.0.0.1:8001", "http://localhost:8002", "http://[::1]:8003"), True),
        (("http://127.0.0.1:8001", "https://abc--8000.hf.jobs"), False),
        (("http://r1:8001",), False),
        ((), False),  # found by name (--sidecar-discover): not known to be local
    ],
)
def test_which_replicas_are_on_this_machine(replicas: tuple[str, ...], local: bool) -> None:
    assert sidecar.on_this_machine(replicas) is local


def test_the_token_warning_is_for_replicas_off_this_machine(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="trainer_entry")
    assert sidecar.upstream_token_env({}, "HF_TOKEN", local=True) == {}
    assert [r.levelno for r in caplog.records] == [logging.INFO]
    assert "no bearer token (its replicas are on this machine's loopback)" in caplog.text
    caplog.clear()
    assert sidecar.upstream_token_env({}, "HF_TOKEN", local=False) == {}
    assert [r.levelno for r in caplog.records] == [logging.WARNING]
    assert "$HF_TOKEN is not set" in caplog.text and "will answer 401" in caplog.text
    caplog.clear()
    env = sidecar.upstream_token_env({"HF_TOKEN": "hf_x"}, "HF_TOKEN", local=True)
    assert env == {"PROXY_UPSTREAM_TOKEN": "hf_x"}  # a token given is sent all the same
    assert "hf_x" not in caplog.text


def test_a_parquet_datasets_columns_are_read_from_its_schema(tmp_path: Path) -> None:
    pa = pytest.importorskip("pyarrow", reason="pyarrow comes with the trainer extra")
    from pyarrow import parquet

    data = tmp_path / "d.parquet"
    parquet.write_table(pa.table({"question": ["1+1?"], "answer": ["2"]}), data)
    plain = TrainerOptions(model="m", dataset=str(data), output_dir=tmp_path, topology=Topology())
    assert "no column 'prompt' (it has question, answer)" in (columns_problem(plain) or "")
    assert columns_problem(replace(plain, prompt_column="question")) is None
