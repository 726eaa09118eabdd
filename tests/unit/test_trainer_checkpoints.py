"""Which checkpoint a restarted trainer resumes from, and what a dead run's leftovers become."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from trainer_entry import checkpoints
from trainer_entry.options import Checkpoints


def save(out: Path, step: int, version: int, *, complete: bool = True) -> Path:
    folder = out / f"checkpoint-{step}"
    (folder / "pytorch_model_fsdp_0").mkdir(parents=True)
    (folder / "rollout_state.json").write_text(
        json.dumps({"prompt_index": step, "model_version": version})
    )
    if complete:
        (folder / "trainer_state.json").write_text(json.dumps({"global_step": step}))
    return folder


def publish(out: Path, *names: str) -> None:
    for name in names:
        (out / ".vllm_lora" / name).mkdir(parents=True)


def test_auto_takes_the_newest_complete_checkpoint(tmp_path: Path) -> None:
    save(tmp_path, 20, 11)
    newest = save(tmp_path, 40, 21)
    save(tmp_path, 60, 31, complete=False)  # killed mid-save: never chosen
    save(tmp_path, 100, 51).joinpath("trainer_state.json").write_text('{"global_st')  # torn write
    assert checkpoints.choose(Checkpoints(resume="auto"), tmp_path) == newest
    assert checkpoints.model_version(newest) == 21


def test_steps_order_numerically_not_by_name(tmp_path: Path) -> None:
    save(tmp_path, 9, 5)
    ten = save(tmp_path, 10, 6)
    assert checkpoints.newest_complete(tmp_path) == ten


def test_nothing_to_resume_is_a_fresh_start(tmp_path: Path) -> None:
    assert checkpoints.choose(Checkpoints(resume="auto"), tmp_path / "absent") is None
    save(tmp_path, 20, 11)
    assert checkpoints.choose(Checkpoints(resume="never"), tmp_path) is None


def test_an_explicit_checkpoint_must_be_complete(tmp_path: Path) -> None:
    half = save(tmp_path, 20, 11, complete=False)
    with pytest.raises(checkpoints.ResumeError, match="not a complete checkpoint"):
        checkpoints.choose(Checkpoints(resume=str(half)), tmp_path)
    whole = save(tmp_path, 40, 21)
    assert checkpoints.choose(Checkpoints(resume=str(whole)), tmp_path) == whole


def test_a_resume_clears_what_the_dead_run_left_past_its_checkpoint(tmp_path: Path) -> None:
    kept = save(tmp_path, 20, 11)
    torn = save(tmp_path, 40, 21, complete=False)
    publish(tmp_path, "trl-policy-v10", "trl-policy-v11", "trl-policy-v12", "trl-policy-v13")
    publish(tmp_path, ".trl-policy-v14.tmp", "notes")
    removed = checkpoints.clear_stale(tmp_path, kept)
    assert torn in removed and not torn.exists() and kept.exists()
    left = sorted(p.name for p in (tmp_path / ".vllm_lora").iterdir())
    # v12 is the next name TRL publishes: the proxy must not pre-load the dead run's copy.
    assert left == ["notes", "trl-policy-v10", "trl-policy-v11"]


def test_a_fresh_start_clears_every_published_version(tmp_path: Path) -> None:
    publish(tmp_path, "trl-policy-v1", "trl-policy-v2")
    checkpoints.clear_stale(tmp_path, None)
    assert list((tmp_path / ".vllm_lora").iterdir()) == []
