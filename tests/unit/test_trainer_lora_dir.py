"""Where TRL saves the adapter at each sync: redirected onto the trainer's disk after the trainer
is built (a stand-in for TRL's trainer here; tests/e2e/test_trainer_parts.py uses the real one),
refused in one line by a TRL without the attribute, and cleaned at start like the bucket's."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from trainer_entry.checkpoints import clear_stale
from trainer_entry.lora_dir import LoraDirMissing, choose, redirect
from trainer_entry.sidecar import mirror_args


class StandIn:
    """What ``redirect`` touches of TRL 1.16's AsyncGRPOTrainer, set as its ``__init__`` does."""

    def __init__(self, output_dir: str) -> None:
        self._lora_dir = os.path.abspath(os.path.join(output_dir, ".vllm_lora"))

    def adapter_dir(self, version: int) -> str:  # as _sync_weight_lora builds it
        return os.path.join(self._lora_dir, f"trl-policy-v{version}")


def test_a_redirected_trainer_saves_loads_and_deletes_in_the_local_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    trainer = StandIn(str(tmp_path / "bucket" / "run"))
    monkeypatch.chdir(tmp_path)
    saved = redirect(trainer, Path("local"))  # relative: made absolute, as TRL's own is
    assert saved == str(tmp_path / "local") == trainer._lora_dir
    assert trainer.adapter_dir(3) == str(tmp_path / "local" / "trl-policy-v3")


class OtherTrl:
    """A TRL whose trainer keeps the directory elsewhere (or computes it)."""


def test_a_trl_without_the_attribute_is_refused_in_one_line(tmp_path: Path) -> None:
    with pytest.raises(LoraDirMissing) as info:
        redirect(OtherTrl(), tmp_path)
    message = str(info.value)
    assert "\n" not in message
    assert "OtherTrl has no _lora_dir" in message and "--adapters-in-bucket" in message
    assert not hasattr(OtherTrl(), "_lora_dir")  # nothing was set


def test_node_zero_chooses_where_trl_saves(tmp_path: Path) -> None:
    fresh, made = choose(None, in_bucket=False)
    try:
        assert made and fresh is not None and fresh.is_dir() and not any(fresh.iterdir())
    finally:
        if fresh is not None:
            fresh.rmdir()
    assert choose(tmp_path / "a" / "b", in_bucket=False) == (tmp_path / "a" / "b", False)
    assert (tmp_path / "a" / "b").is_dir()
    assert choose(None, in_bucket=True) == (None, False)


def test_the_proxy_is_told_both_directories_or_none(tmp_path: Path) -> None:
    bucket = tmp_path / "run" / ".vllm_lora"
    assert mirror_args(tmp_path / "l", bucket) == [
        *("--adapters-local", str(tmp_path / "l"), "--adapters-mirror", str(bucket))
    ]
    assert mirror_args(None, bucket) == []


def test_a_resume_clears_the_local_directory_past_the_resume_point(tmp_path: Path) -> None:
    output, local = tmp_path / "run", tmp_path / "local"
    checkpoint = output / "checkpoint-8"
    checkpoint.mkdir(parents=True)
    (checkpoint / "trainer_state.json").write_text("{}")
    (checkpoint / "rollout_state.json").write_text(json.dumps({"model_version": 4}))
    for name in ("trl-policy-v3", "trl-policy-v5", ".trl-policy-v6.tmp", ".mirror/1-v5"):
        (local / name).mkdir(parents=True)
    for name in ("trl-policy-v3", "trl-policy-v4", "trl-policy-v5"):
        (output / ".vllm_lora" / name).mkdir(parents=True)
    removed = clear_stale(output, checkpoint, local)
    assert sorted(p.name for p in local.iterdir()) == ["trl-policy-v3"]
    assert sorted(p.name for p in (output / ".vllm_lora").iterdir()) == [
        "trl-policy-v3", "trl-policy-v4"
    ]  # fmt: skip
    assert local / ".mirror" in removed
