"""Shared fleets: ``deploy fleet up`` (replicas and a proxy job that serves many runs),
``deploy up --fleet`` (a run's trainer alone, joining it), ``deploy down`` of one run leaving the
fleet and the others, ``deploy fleet down|status``; in ``--dry-run`` and through the Jobs
stand-in with the real huggingface_hub client."""

from __future__ import annotations

import io
import json
from typing import Any

import pytest

from deploy.cli import Runtime, main
from deploy.install import project_version, wheel_filename
from deploy.keys import fleet_key
from tests.deploy.conftest import TOKEN, TRAINER_ARGS, WHEEL, Result, Stand
from tests.deploy.test_dry_run import _no_publish, _no_token
from tests.support.clock import SteppingClock as FakeClock

BUCKET = ("--bucket", "alice/rl", "--model", "Qwen/Qwen2.5-Math-1.5B")
FLEET_UP = ("fleet", "up", "--fleet", "f1", *BUCKET, "--replica-count", "2")


def run(stand: Stand, *argv: str) -> Result:
    """``python -m deploy ARGV`` against the stand-in (``--hub-endpoint`` after the command)."""
    split = 2 if argv[0] == "fleet" else 1
    out, err = io.StringIO(), io.StringIO()
    runtime = Runtime(clock=stand.clock, token=lambda: TOKEN, build=stand.build, out=out, err=err)
    code = main([*argv[:split], "--hub-endpoint", stand.url, *argv[split:]], runtime)
    return Result(code, out.getvalue(), err.getvalue())


def join(stand: Stand, run_name: str, *extra: str) -> Result:
    return run(stand, "up", "--fleet", "f1", "--run-name", run_name, *BUCKET, *extra,
               *TRAINER_ARGS)  # fmt: skip


def dry(*argv: str, monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    out, err = io.StringIO(), io.StringIO()
    runtime = Runtime(clock=FakeClock(), token=_no_token, publish=_no_publish, out=out, err=err)
    split = 2 if argv[0] == "fleet" else 1
    full = [*argv[:split], "--hub-endpoint", "http://127.0.0.1:9", "--dry-run", *argv[split:]]
    assert main(full, runtime) == 0, err.getvalue()
    assert TOKEN not in out.getvalue() + err.getvalue()
    specs: list[dict[str, Any]] = json.loads(out.getvalue())
    return specs


def test_a_fleet_is_replicas_and_a_proxy_job_that_serves_runs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    specs = dry(*FLEET_UP, monkeypatch=monkeypatch)

    assert [spec["name"] for spec in specs] == ["f1-replica-0", "f1-replica-1", "f1-proxy"]
    assert {spec["network_group"] for spec in specs} == {"f1"}
    assert all(spec["labels"]["rollout-fleet"] == "f1" for spec in specs)
    replica, _, proxy = specs
    # Room for several runs' windows on every replica, and their ranks.
    assert replica["command"][2].endswith("--adapter-receiver --max-loras 12 --max-lora-rank 16")
    # The admin API's key (runs declare themselves), the run's replica key; not the HF token.
    assert proxy["secrets"] == {"PROXY_UPSTREAM_TOKEN": "***", "PROXY_ADMIN_KEY": "***"}
    # No one run's directory to watch: each run's adapters come through its relay.
    assert "--adapters-dir" not in proxy["command"][2]


def test_a_run_on_a_fleet_is_its_trainer_alone_at_its_own_path(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    argv = ("up", "--fleet", "f1", "--run-name", "lr3", *BUCKET, "--run-weight", "2")
    (trainer,) = dry(*argv, *TRAINER_ARGS, monkeypatch=monkeypatch)

    assert trainer["name"] == "lr3-trainer"
    assert (trainer["network_group"], trainer["network_aliases"]) == ("f1", ["lr3-trainer"])
    assert trainer["labels"] == {"rollout-run": "lr3", "rollout-role": "trainer",
                                 "rollout-fleet": "f1"}  # fmt: skip
    assert trainer["secrets"] == {"HF_TOKEN": "***", "FLEET_ADMIN_KEY": "***"}
    assert (
        '--proxy-url "http://${HF_NETWORK_GROUP_PREFIX}proxy:8000/runs/lr3" '
        "--fleet-key-env FLEET_ADMIN_KEY --run-weight 2 --proxy-arg=--adapter-push "
        "--output-dir /lora/lr3"
    ) in trainer["command"][2]
    assert trainer["volumes"][0]["read_only"] is False


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (
            ("up", "--fleet", "f1", *BUCKET, "--replica-count", "2"),
            "--replica-count: not with --fleet",
        ),
        (("up", "--fleet", "f1", *BUCKET, "--topology", "job"), "--topology: not with --fleet"),
        (("up", "--fleet", "f1", *BUCKET, "--network", "public"), "--network: a shared fleet"),
        (("up", "--fleet", "f1", *BUCKET, "--run-name", "a" * 27), "at most 26 characters"),
        (("up", *BUCKET), "--replica-count: required (but with --fleet"),
        ((*FLEET_UP, "--network", "public"), "--network: a shared fleet"),
        ((*FLEET_UP, "--max-loras", "1"), "--max-loras: at least 2 (got 1)"),
        (("fleet", "up", "--fleet", "F1", *BUCKET, "--replica-count", "1"), "--fleet: 1-40 lower"),
    ],
)
def test_bad_fleet_flags_are_one_line_naming_the_flag(
    argv: tuple[str, ...], said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as info:
        main([*argv, "--dry-run", *(TRAINER_ARGS if argv[0] == "up" else ())])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert said in err and err.count("\n") == 1, err


def test_the_fleet_key_is_derived_not_stored() -> None:
    key = fleet_key(TOKEN, "f1")
    assert key == fleet_key(TOKEN, "f1")  # every later `deploy up --fleet` finds the same
    assert key not in (fleet_key(TOKEN, "f2"), fleet_key(TOKEN + "x", "f1"))
    assert TOKEN not in key and len(key) == 43  # 256 bits, URL-safe


def test_runs_join_a_fleet_that_is_up_and_leave_it_one_by_one(stand: Stand) -> None:
    urls = [stand.replica(f"f1-replica-{index}") for index in range(2)]
    stand.proxy("f1-proxy", urls)
    early = join(stand, "lr1")
    assert early.code == 1
    assert "fleet 'f1' is not up in namespace alice (no proxy job of it is active)" in early.err

    fleet = run(stand, *FLEET_UP)
    assert fleet.code == 0, fleet.err
    assert "fleet f1 is up in namespace alice" in fleet.out
    assert "put a run on it:  python -m deploy up --fleet f1 --run-name RUN" in fleet.out
    assert [job.name for job in stand.hub.jobs.values()] == [
        "f1-replica-0", "f1-replica-1", "f1-proxy"
    ]  # fmt: skip

    first, second = join(stand, "lr1"), join(stand, "lr3", "--run-weight", "2")
    assert (first.code, second.code) == (0, 0), first.err + second.err
    assert "run lr3 is up on fleet f1 in namespace alice" in second.out
    assert "stop this run:      python -m deploy down --run-name lr3" in second.out
    # The same key, derived from the token, on the proxy job and in every run's trainer.
    proxy = stand.hub.named("f1-proxy").spec
    trainer = stand.hub.named("lr3-trainer").spec
    key = fleet_key(TOKEN, "f1")
    assert proxy["secrets"]["PROXY_ADMIN_KEY"] == trainer["secrets"]["FLEET_ADMIN_KEY"] == key
    assert TOKEN not in json.dumps(proxy)
    assert trainer["network"] == {"group": "f1", "aliases": ["lr3-trainer"]}
    assert "/runs/lr3" in trainer["command"][2]
    # Only the trainers were launched for the runs; each wheel went to its run's folder.
    assert len(stand.hub.jobs) == 5
    assert stand.uploaded(path="lr3/code/" + wheel_filename(project_version("wheel"))) == WHEEL

    # A fleet with runs on it is not stopped by mistake.
    refused = run(stand, "down", "--run-name", "f1")
    assert refused.code == 1 and "is a fleet with runs training on it" in refused.err
    refused = run(stand, "fleet", "down", "--fleet", "f1")
    assert refused.code == 1 and "runs still train on fleet 'f1': lr1-trainer" in refused.err

    # One run stops; the fleet and the other run go on.
    assert run(stand, "down", "--run-name", "lr1").code == 0
    active = {job.name for job in stand.hub.jobs.values() if not job.terminal}
    assert active == {"f1-replica-0", "f1-replica-1", "f1-proxy", "lr3-trainer"}

    status = run(stand, "fleet", "status", "--fleet", "f1")
    assert status.code == 0, status.err
    assert "runs on fleet f1: 2 trainer job(s)" in status.out
    assert "lr3-trainer" in status.out and "f1-proxy" in status.out

    # --force stops the fleet with the runs still on it.
    forced = run(stand, "fleet", "down", "--fleet", "f1", "--force")
    assert forced.code == 0, forced.err
    assert "lr3-trainer (job" in forced.out and "cancelled with its fleet" in forced.out
    assert all(job.terminal for job in stand.hub.jobs.values())
