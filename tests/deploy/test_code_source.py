"""How the jobs get the project (``--code``): by default a wheel, built from the source checkout,
or, without one, packed again from the installed package; ``pypi`` only when asked (nothing is
published yet, so a default of ``pypi`` could not work). The packed wheel is checked by pip
itself: installed offline, without dependencies, into a folder of the test's own."""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import json
import subprocess
import sys
import zipfile
from importlib import metadata
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest

from deploy import cli, install, wheel
from deploy.cli import Runtime, main
from deploy.errors import DeployError
from deploy.install import DISTRIBUTION, default_source, install_for, wheel_filename
from deploy.plan import RunPlan
from deploy.wheel import publish_code, repack_installed
from tests.deploy.conftest import TOKEN, TRAINER_ARGS
from tests.support.clock import SteppingClock as FakeClock

VERSION = metadata.version(DISTRIBUTION)
INFO = f"rollout_proxy-{VERSION}.dist-info"
UP = ("up", "--bucket", "team/rl", "--model", "Qwen/Qwen2.5-Math-1.5B", "--replica-count", "1")


def _record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def _installed(site: Path) -> Path:
    """A site-packages holding this project as pip leaves it: the package's files, byte code,
    a console script outside, and what the installer added to the metadata."""
    files = {
        "proxy/__init__.py": b"VALUE = 42\n",
        "proxy/__pycache__/__init__.cpython-311.pyc": b"\x00byte code",
        "trainer_entry/fsdp2.yaml": b"distributed_type: FSDP\n",
        f"{INFO}/METADATA": f"Name: {DISTRIBUTION}\nVersion: {VERSION}\n".encode(),
        f"{INFO}/WHEEL": b"Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        f"{INFO}/entry_points.txt": b"[console_scripts]\nrollout-proxy = proxy:VALUE\n",
        f"{INFO}/INSTALLER": b"pip\n",
        f"{INFO}/direct_url.json": b'{"url": "file:///somewhere"}',
        "../../../bin/rollout-proxy": b"#!/usr/bin/python\n",
    }
    lines = []
    for name, data in files.items():
        path = site / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        lines.append(_record_line(name, data))
    (site / INFO / "RECORD").write_text("\n".join([*lines, f"{INFO}/RECORD,,"]) + "\n")
    return site


def test_the_default_is_a_wheel_with_or_without_a_checkout(monkeypatch: pytest.MonkeyPatch) -> None:
    assert default_source() == "wheel"
    monkeypatch.setattr(install, "source_root", lambda: None)
    assert default_source() == "wheel"
    wheel = install_for(default_source(), "/lora/r1/code")
    assert wheel.requirement == f"/lora/r1/code/{wheel_filename(VERSION)}"  # the installed one
    assert install_for("pypi", "/lora/r1/code").requirement == f"{DISTRIBUTION}=={VERSION}"


def _dry_run(*extra: str, monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    out, err = io.StringIO(), io.StringIO()
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    code = main([*UP, "--dry-run", *extra, *TRAINER_ARGS], Runtime(clock=FakeClock(), out=out,
                                                                  err=err))  # fmt: skip
    assert code == 0, err.getvalue()
    specs: list[dict[str, Any]] = json.loads(out.getvalue())
    return specs


def test_without_a_checkout_the_jobs_install_the_wheel_unless_pypi_is_asked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(install, "source_root", lambda: None)
    default = " ".join(_dry_run(monkeypatch=monkeypatch)[0]["command"])
    assert wheel_filename(VERSION) in default and f"{DISTRIBUTION}==" not in default
    asked = " ".join(_dry_run("--code", "pypi", monkeypatch=monkeypatch)[0]["command"])
    assert f"{DISTRIBUTION}=={VERSION}" in asked


def test_the_help_says_pypi_needs_a_published_version() -> None:
    (up,) = [
        action.choices["up"]
        for action in cli.build_parser()._actions
        if isinstance(action.choices, dict) and "up" in action.choices
    ]
    (code,) = [action for action in up._actions if "--code" in action.option_strings]
    assert "default: wheel" in (code.help or "") and "published on PyPI" in (code.help or "")


def test_the_installed_package_is_packed_into_the_wheel_it_came_from(tmp_path: Path) -> None:
    site = _installed(tmp_path / "site")
    out = tmp_path / "out"
    out.mkdir()
    wheel = repack_installed(site, out, VERSION)
    assert wheel.name == wheel_filename(VERSION)
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        record = archive.read(f"{INFO}/RECORD").decode()
        contents = {name: archive.read(name) for name in names}
    assert names == {
        "proxy/__init__.py",
        "trainer_entry/fsdp2.yaml",
        f"{INFO}/METADATA",
        f"{INFO}/WHEEL",
        f"{INFO}/entry_points.txt",
        f"{INFO}/RECORD",
    }  # no byte code, no script, nothing the installer added
    rows = {row[0]: row for row in csv.reader(record.splitlines())}
    assert rows[f"{INFO}/RECORD"] == [f"{INFO}/RECORD", "", ""]
    for name, data in contents.items():
        if name != f"{INFO}/RECORD":
            assert ",".join(rows[name]) == _record_line(name, data)
    target = tmp_path / "target"
    pip = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-index"]
    subprocess.run([*pip, "--target", str(target), str(wheel)], check=True, timeout=120)
    assert (target / "proxy" / "__init__.py").read_bytes() == b"VALUE = 42\n"
    assert (target / "bin" / "rollout-proxy").is_file()  # pip made the console script again


def test_a_version_not_installed_there_is_said(tmp_path: Path) -> None:
    (tmp_path / "out").mkdir()
    with pytest.raises(DeployError, match=r"no installed rollout-proxy .* with a file list"):
        repack_installed(tmp_path, tmp_path / "out", VERSION)


def test_without_a_checkout_up_uploads_the_packed_wheel(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    site = _installed(tmp_path / "site")
    monkeypatch.setattr(wheel, "source_root", lambda: None)
    monkeypatch.setattr(wheel, "installed_root", lambda: site)
    monkeypatch.setattr(install, "source_root", lambda: None)
    uploads: list[tuple[str, str, bytes]] = []

    class Jobs:
        def upload(self, bucket: str, local: Path, destination: str) -> None:
            uploads.append((bucket, destination, local.read_bytes()))

    def build(root: Path, out_dir: Path, version: str) -> Path:
        raise AssertionError("no checkout: nothing to build")

    plan = SimpleNamespace(
        install=install_for("wheel", "/lora/r1/code"), bucket="team/rl", code_dir="r1/code"
    )
    said: list[str] = []
    publish_code(cast(Any, Jobs()), cast(RunPlan, plan), said.append, build)
    ((bucket, destination, data),) = uploads
    assert (bucket, destination) == ("team/rl", f"r1/code/{wheel_filename(VERSION)}")
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        assert archive.read("proxy/__init__.py") == b"VALUE = 42\n"
    assert said[0].startswith(f"packing the installed rollout-proxy ({site}) as a wheel")
