"""A missing ``--adapters-dir`` (a bucket that mounts late) is said: one WARNING line at the first
look, a reminder every ``MISSING_REMIND_S`` while it stays missing, a warning in the status and
the advice meanwhile (``watcher.warnings``), and one INFO line when it appears and the watch
starts. What was found before is kept while the directory is gone, not reported removed."""

from __future__ import annotations

import errno
import logging
import os
from pathlib import Path
from typing import Any

import pytest

from proxy.adapters.registry import Fingerprint
from proxy.adapters.sources import DirectorySource
from proxy.adapters.watcher import MISSING_REMIND_S, Watcher
from tests.support.adapters import write_adapter
from tests.support.clock import FakeClock

Changes = list[tuple[list[str], list[str]]]


def watching(root: Path, clock: FakeClock) -> tuple[Watcher, Changes]:
    changes: Changes = []

    async def on_change(added: dict[str, tuple[str, Fingerprint]], removed: list[str]) -> None:
        changes.append((sorted(added), removed))

    def failed(task: str, exc: BaseException) -> None:
        raise AssertionError(f"{task} failed: {exc}")

    return Watcher(DirectorySource(root, 1.0), clock, on_change, failed), changes


def said(caplog: pytest.LogCaptureFixture, level: int) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == level]


async def test_a_missing_directory_is_said_then_its_appearance(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="proxy.watcher")
    root = tmp_path / "lora" / ".vllm_lora"
    clock = FakeClock()
    watcher, changes = watching(root, clock)
    await watcher.poll()
    assert said(caplog, logging.WARNING) == [
        f"adapter directory {root} does not exist (yet): no adapter version is found until it "
        "does; looking every 1 s (a bucket may mount late)"
    ]
    assert watcher.warnings() == [
        f"adapter directory {root} does not exist (yet): no adapter version is found until it does"
    ]
    for _ in range(3):  # looked at again and again: no more lines within the reminder interval
        clock.advance(1.0)
        await watcher.poll()
    assert len(said(caplog, logging.WARNING)) == 1
    clock.advance(MISSING_REMIND_S)
    await watcher.poll()
    assert said(caplog, logging.WARNING)[1] == (
        f"adapter directory {root} does not exist (yet), {MISSING_REMIND_S + 3:.0f} s after the "
        "first look"
    )
    assert changes == []  # no answer yet: nothing is news, nothing is removed
    write_adapter(root, "trl-policy-v1")
    clock.advance(1.0)
    await watcher.poll()
    assert said(caplog, logging.INFO) == [
        f"watching directory {root} for adapter versions (it appeared after "
        f"{MISSING_REMIND_S + 4:.0f} s)"
    ]
    assert watcher.warnings() == [] and watcher.missing == ""
    assert changes == [(["trl-policy-v1"], [])]


async def test_a_directory_that_goes_away_keeps_what_was_found(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A mount that drops for a while: its versions are not reported removed (which would drop
    them from every replica); the directory is said missing instead."""
    caplog.set_level(logging.INFO, logger="proxy.watcher")
    root = tmp_path / "lora"
    write_adapter(root, "trl-policy-v1")
    watcher, changes = watching(root, FakeClock())
    await watcher.poll()
    assert said(caplog, logging.INFO) == [f"watching directory {root} for adapter versions"]
    moved = root.rename(tmp_path / "elsewhere")
    await watcher.poll()
    assert watcher.missing and changes == [(["trl-policy-v1"], [])]
    moved.rename(root)
    await watcher.poll()
    assert not watcher.missing and changes == [(["trl-policy-v1"], [])]


def failing_scandir(monkeypatch: pytest.MonkeyPatch, fails: dict[Path, OSError]) -> None:
    """``os.scandir`` raising ``fails[path]`` for those paths (a bucket mount's hiccup)."""
    real = os.scandir

    def scandir(path: Any) -> Any:
        error = fails.get(Path(path))
        if error is not None:
            raise error
        return real(path)

    monkeypatch.setattr(os, "scandir", scandir)


async def test_a_directory_that_cannot_be_read_for_a_while_drops_no_version(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A listing that fails (EIO, a FUSE mount's lost connection) is not an empty directory: it
    dropped every version of the window from the fleet. Said once; nothing removed; the watch
    goes on where it was when the directory reads again."""
    caplog.set_level(logging.INFO, logger="proxy.watcher")
    clock = FakeClock()
    watcher, changes = watching(tmp_path, clock)
    for name in ("trl-policy-v1", "trl-policy-v2"):
        write_adapter(tmp_path, name)
    await watcher.poll()
    assert changes == [(["trl-policy-v1", "trl-policy-v2"], [])]
    fails = {tmp_path: OSError(errno.ENOTCONN, "Transport endpoint is not connected")}
    failing_scandir(monkeypatch, fails)
    for _ in range(3):
        clock.advance(1.0)
        await watcher.poll()
    assert changes == [(["trl-policy-v1", "trl-policy-v2"], [])]  # nothing dropped
    warned = said(caplog, logging.WARNING)
    assert len(warned) == 1 and "Transport endpoint is not connected" in warned[0], warned
    fails.clear()
    write_adapter(tmp_path, "trl-policy-v3")
    await watcher.poll()
    assert changes[1:] == [(["trl-policy-v3"], [])]


async def test_a_version_that_cannot_be_read_keeps_its_last_answer(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One version's directory unreadable for a moment is not that version gone; a new one not
    read yet waits until it can be read."""
    caplog.set_level(logging.INFO, logger="proxy.watcher")
    clock = FakeClock()
    watcher, changes = watching(tmp_path, clock)
    v1 = Path(write_adapter(tmp_path, "trl-policy-v1"))
    await watcher.poll()
    v2 = Path(write_adapter(tmp_path, "trl-policy-v2"))
    denied = PermissionError(errno.EACCES, "Permission denied")
    fails: dict[Path, OSError] = {v1: denied, v2: denied}
    failing_scandir(monkeypatch, fails)
    for _ in range(2):
        clock.advance(1.0)
        await watcher.poll()
    assert changes == [(["trl-policy-v1"], [])]  # v1 kept, v2 not reported yet
    warned = said(caplog, logging.WARNING)
    assert (
        len(warned) == 1
        and "cannot read trl-policy-v1 (Permission denied), trl-policy-v2 (" in warned[0]
    )
    fails.clear()
    clock.advance(1.0)
    await watcher.poll()
    assert changes[1:] == [(["trl-policy-v2"], [])]
