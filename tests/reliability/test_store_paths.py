"""Adapter stores at predictable paths under the shared temp directory: a symlink, another
user's or a world-writable directory planted there is never followed, emptied or deleted (issue:
a link planted at ``<tmp>/rollout-proxy-<port>-adapters`` had its target emptied at start and
removed at exit). Real proxies on loopback."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import aiohttp
import pytest

from adapter_receiver.store import Store, StoreError
from proxy.app import PROXY, build_app, serve
from proxy.config import Settings
from replica_entry.vllm_backend import Install, build_launch
from tests.support.fleet import FAST_HEALTH, run_sim
from tests.support.uploads import listing
from tests.unit.test_vllm_backend import _options
from trainer_entry.sidecar import free_port


def _victim(tmp_path: Path) -> Path:
    victim = tmp_path / "precious"
    victim.mkdir()
    (victim / "thesis.tex").write_text("years of work")
    return victim


async def _serve_on(port: int, sim_url: str, **extra: object) -> tuple[Path, int]:
    """Start and stop a proxy on ``port``; its store root and how many adapters it listed."""
    settings = Settings.model_validate(
        {"replicas": [sim_url], "port": port, **FAST_HEALTH, **extra}
    )
    app = build_app(settings)
    async with serve(app, port=port) as url, aiohttp.ClientSession() as session:
        root = app[PROXY].adapters.receiver.store.root
        assert root.is_dir() and not root.is_symlink()
        assert (root.stat().st_mode & 0o077) == 0 or extra  # private unless named by the user
        count = len((await listing(session, url))["adapters"])
    return root, count


async def test_a_symlink_at_the_default_path_is_never_followed(tmp_path: Path) -> None:
    victim, port = _victim(tmp_path), free_port()
    planted = Path(tempfile.gettempdir()) / f"rollout-proxy-{port}-adapters"
    planted.symlink_to(victim)
    try:
        async with run_sim() as sim:
            root, count = await _serve_on(port, sim.url)
        assert root != planted and count == 0
        assert not root.exists()  # its own fresh directory, removed at exit
        assert (victim / "thesis.tex").read_text() == "years of work"
        assert planted.is_symlink()  # not removed either: it is not ours
    finally:
        planted.unlink()


async def test_a_world_writable_directory_at_the_default_path_is_not_adopted(
    tmp_path: Path,
) -> None:
    port = free_port()
    planted = Path(tempfile.gettempdir()) / f"rollout-proxy-{port}-adapters"
    planted.mkdir()
    os.chmod(planted, 0o777)
    (planted / "theirs").write_text("x")
    try:
        async with run_sim() as sim:
            root, _ = await _serve_on(port, sim.url)
        assert root != planted
        assert (planted / "theirs").exists()
    finally:
        (planted / "theirs").unlink()
        planted.rmdir()


@pytest.mark.parametrize("kind", ["symlink", "world-writable"])
def test_a_named_store_that_is_not_private_is_refused_naming_it(kind: str, tmp_path: Path) -> None:
    victim, named = _victim(tmp_path), tmp_path / "store"
    if kind == "symlink":
        named.symlink_to(victim)
    else:
        named.mkdir()
        os.chmod(named, 0o777)
    with pytest.raises(StoreError, match=f"adapter store refused: {named}"):
        Store(named, 1 << 20).reset()
    assert (victim / "thesis.tex").exists()


def test_the_vllm_backend_leaves_a_planted_default_to_the_receivers_private_store(
    tmp_path: Path,
) -> None:
    port = free_port()
    planted = Path(tempfile.gettempdir()) / f"rollout-adapters-{port}"
    options = _options("--model", "m", "--port", str(port))
    assert build_launch(options, Install.GPU, {}).env["ROLLOUT_ADAPTER_STORE"] == str(planted)
    planted.symlink_to(_victim(tmp_path))
    try:  # the receiver then makes a private directory of its own (mkdtemp)
        assert "ROLLOUT_ADAPTER_STORE" not in build_launch(options, Install.GPU, {}).env
    finally:
        planted.unlink()


def test_a_link_planted_between_the_check_and_the_mkdir_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The race the audit found: the path is free when checked, a link appears before the
    store's ``mkdir`` (which then finds something there): never followed, its target kept."""
    victim = _victim(tmp_path)
    root = tmp_path / "shared" / "rollout-proxy-9-adapters"
    real_mkdir = os.mkdir

    def racing_mkdir(path: object, mode: int = 0o777, **kwargs: object) -> None:
        if Path(str(path)) == root:
            root.symlink_to(victim)  # the attacker wins the race
        real_mkdir(path, mode, **kwargs)  # type: ignore[arg-type]

    root.parent.mkdir()
    monkeypatch.setattr(os, "mkdir", racing_mkdir)
    with pytest.raises(StoreError, match="symlink"):
        Store(root, 1 << 20).reset()
    assert (victim / "thesis.tex").read_text() == "years of work"


def test_a_directory_of_another_user_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    named = tmp_path / "store"
    named.mkdir(mode=0o700)
    (named / "theirs").write_text("not ours to empty")
    someone_else = os.getuid() + 1
    monkeypatch.setattr(os, "getuid", lambda: someone_else)  # the directory is now not ours
    with pytest.raises(StoreError, match="belongs to another user"):
        Store(named, 1 << 20).reset()
    assert (named / "theirs").read_text() == "not ours to empty"
