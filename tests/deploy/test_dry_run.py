"""``deploy up --dry-run``: every job spec as JSON, checked field by field, and what the plan costs;
no call, no token."""

from __future__ import annotations

import io
import json
import re
from typing import Any

import pytest

from deploy.cli import Runtime, main
from deploy.install import project_version
from deploy.prices import plan_cost
from deploy.specs import JobSpec
from proxy import __version__
from replica_entry.vllm_backend import build_parser, options_from_args, split_passthrough
from tests.deploy.conftest import TOKEN, TRAINER_ARGS
from tests.support.clock import SteppingClock as FakeClock

ARGS = ("up", "--bucket", "team/rl", "--model", "Qwen/Qwen2.5-Math-1.5B", "--replica-count", "2")


def _no_token() -> str | None:
    raise AssertionError("--dry-run must not look for a token")


def _no_publish(*args: object) -> None:
    raise AssertionError("--dry-run must not publish anything")


def dry_run(*extra: str, monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    out, err = io.StringIO(), io.StringIO()
    runtime = Runtime(clock=FakeClock(), token=_no_token, publish=_no_publish, out=out, err=err)
    # An endpoint nothing listens on: any call would fail the command.
    argv = [*ARGS, "--hub-endpoint", "http://127.0.0.1:9", "--dry-run", *extra]
    if "--" not in extra:
        argv.extend(TRAINER_ARGS)
    assert main(argv, runtime) == 0, err.getvalue()
    assert TOKEN not in out.getvalue() + err.getvalue()
    specs: list[dict[str, Any]] = json.loads(out.getvalue())
    return specs


FIELDS = {
    "name", "namespace", "role", "image", "command", "env", "secrets", "flavor", "timeout",
    "volumes", "expose", "labels", "attempts", "network_group", "network_aliases",
}  # fmt: skip


def test_sidecar_dry_run(monkeypatch: pytest.MonkeyPatch) -> None:
    specs = dry_run(
        "--code", "pypi", "--", "--dataset", "openai/gsm8k", "--max-steps", "500",
        monkeypatch=monkeypatch,
    )  # fmt: skip

    assert [spec["name"] for spec in specs] == [
        "rollout-20260101-000000-replica-0",
        "rollout-20260101-000000-replica-1",
        "rollout-20260101-000000-trainer",
    ]
    assert [spec["role"] for spec in specs] == ["replica", "replica", "trainer"]
    assert all(set(spec) == FIELDS for spec in specs)
    assert {spec["namespace"] for spec in specs} == {"team"}  # the bucket's, by default
    assert [spec["attempts"] for spec in specs] == [3, 3, 3]  # HF Jobs retries a failed job
    run = "rollout-20260101-000000"
    # One private network group per run; each job claims its role as alias.
    assert {spec["network_group"] for spec in specs} == {run}
    assert [spec["network_aliases"] for spec in specs] == [["replica"], ["replica"], ["trainer"]]
    for index, replica in enumerate(specs[:2]):
        assert replica["image"] == "vllm/vllm-openai:v0.32.0"
        assert replica["flavor"] == "h200"
        assert replica["timeout"] == "390m"  # the trainer's 6h + the 30 min start-up wait
        assert replica["expose"] == [8000]
        # The run's replica key guards vLLM and the receiver inside the group (masked here).
        assert replica["secrets"] == {"HF_TOKEN": "***", "VLLM_API_KEY": "***"}
        assert replica["env"]["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] == "True"
        assert replica["labels"] == {
            "rollout-run": run,
            "rollout-role": "replica",
            "rollout-replicas": run,
            "rollout-index": str(index),
        }
        assert replica["volumes"] == [
            {"type": "bucket", "source": "team/rl", "mount_path": "/lora", "read_only": True}
        ]
        assert replica["command"][:2] == ["sh", "-c"]
        # Nothing the vLLM image ships may change: our wheel without its dependencies, then
        # only the few replica_entry imports, each held at the image's version if present.
        assert replica["command"][2].startswith(
            "python3 -m pip list --format=freeze > /tmp/image-packages.txt && "
            "python3 -m pip install --no-cache-dir --quiet --no-deps "
            f"rollout-proxy=={__version__} && "
            "(python3 -m pip install --no-cache-dir --quiet -c /tmp/image-packages.txt "
            "'aiohttp>=3.14,<4' 'orjson>=3.10' 'prometheus-client>=0.20' 'pydantic>=2.7,<3' "
            "'xxhash>=3.4' || (echo 'rollout-proxy: the packages of this image are older than "
            "this job needs (see the pip conflict above; none was changed): use a newer image "
            "(--replica-image, --trainer-image)' >&2; exit 1)) && exec "
            "python3 -m replica_entry --backend vllm --host 0.0.0.0 --port 8000 "
            "--model Qwen/Qwen2.5-Math-1.5B --adapter-receiver "
            # The LoRA limits follow the trainer's recipe: rank 1 (held by vLLM's rank 1), a
            # window of 4 versions.
            "--max-lora-rank 1 --max-staleness 4"
        )
    trainer = specs[2]
    # TRL's rollout worker needs vLLM: the trainer runs on the replicas' image.
    assert trainer["image"] == "vllm/vllm-openai:v0.32.0"
    assert trainer["flavor"] == "h200x2"
    assert trainer["timeout"] == "6h"
    assert trainer["expose"] == [8000]
    assert trainer["secrets"] == {"HF_TOKEN": "***", "VLLM_API_KEY": "***"}
    assert trainer["labels"] == {"rollout-run": run, "rollout-role": "trainer"}
    assert trainer["volumes"] == [
        {"type": "bucket", "source": "team/rl", "mount_path": "/lora", "read_only": False}
    ]
    script = trainer["command"][2]
    # Into the image as the replicas: nothing it ships changes; TRL the tested release with
    # its kernels; then what the trainer cannot start without is imported.
    assert script.startswith(
        "python3 -m pip list --format=freeze > /tmp/image-packages.txt && "
        f"python3 -m pip install --no-cache-dir --quiet --no-deps rollout-proxy=={__version__} && "
        "(python3 -m pip install --no-cache-dir --quiet -c /tmp/image-packages.txt 'aiohttp>=3"
    )
    assert "'accelerate>=1.10' 'math-verify>=0.7' 'trl[kernels]==1.16.0' ||" in script
    assert (
        "&& (python3 -c 'import vllm' || (echo 'rollout-proxy: this image cannot import vllm"
        in script
    )
    assert "&& (python3 -c 'import kernels' ||" in script
    # The sidecar finds the replicas at their alias, which the job's shell expands.
    assert (
        '--discover "dns:${HF_NETWORK_GROUP_PREFIX}replica:8000" '
        "--replica-token-env VLLM_API_KEY --sidecar-host 0.0.0.0 --sidecar-port 8000 "
        f"--proxy-arg=--adapter-push --output-dir /lora/{run} --dataset openai/gsm8k "
        "--max-steps 500"
    ) in script


def test_job_topology_dry_run(monkeypatch: pytest.MonkeyPatch) -> None:
    specs = dry_run(
        "--topology", "job", "--run-name", "exp1", "--code", "wheel", "--mount-path", "/mnt/b",
        "--proxy-flavor", "cpu-basic", "--timeout", "90m", "--network", "public",
        monkeypatch=monkeypatch,
    )  # fmt: skip

    assert [spec["role"] for spec in specs] == ["replica", "replica", "proxy", "trainer"]
    mounts = [volume for spec in specs for volume in spec["volumes"]]
    assert len(mounts) == 4
    assert {(volume["type"], volume["source"], volume["mount_path"]) for volume in mounts} == {
        ("bucket", "team/rl", "/mnt/b")
    }
    # Read-only but for the trainer and the proxy job (its state file: its retries find it).
    assert [volume["read_only"] for volume in mounts] == [True, True, False, False]
    assert [spec["timeout"] for spec in specs] == ["150m", "150m", "2h", "90m"]
    proxy = specs[2]
    assert proxy["name"] == "exp1-proxy"
    assert proxy["image"] == "python:3.11-slim"
    assert proxy["flavor"] == "cpu-basic"
    assert proxy["expose"] == [8000]
    assert proxy["secrets"] == {"HF_TOKEN": "***", "PROXY_UPSTREAM_TOKEN": "***"}
    assert proxy["labels"] == {"rollout-run": "exp1", "rollout-role": "proxy"}
    script = proxy["command"][2]
    wheel = f"/mnt/b/exp1/code/rollout_proxy-{project_version('wheel')}-py3-none-any.whl"
    assert f"{wheel} && exec python3 -m proxy" in script
    assert (
        "--host 0.0.0.0 --port 8000 --replica-urls 'https://<exp1-replica-0 job id>--8000" in script
    )
    assert script.endswith(
        " --discover hf-jobs:rollout-replicas=exp1 --discover-namespace team"
        " --adapters-dir /mnt/b/exp1/.vllm_lora --state-dir /mnt/b/exp1/.proxy-state"
        " --supervise --adapter-push"
    )
    trainer = specs[3]["command"][2]
    assert (
        "--proxy-url 'https://<exp1-proxy job id>--8000.hf.jobs' --proxy-token-env HF_TOKEN "
        "--proxy-arg=--adapter-push --output-dir /mnt/b/exp1"
    ) in trainer


@pytest.mark.parametrize("topology", ["sidecar", "job"])
def test_adapter_push_is_on_and_shown_unless_turned_off(
    topology: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    specs = dry_run("--code", "image", "--topology", topology, monkeypatch=monkeypatch)
    replicas = [s["command"] for s in specs if s["role"] == "replica"]
    proxies = [s["command"] for s in specs if s["role"] != "replica"]  # sidecar, relay, job
    assert all("--adapter-receiver" in command for command in replicas)
    # On 0.0.0.0 the receiver needs the run's key (a secret: the job's environment), or
    # replica_entry refuses to start: its own parser says so.
    for spec in (s for s in specs if s["role"] == "replica"):
        command = spec["command"]
        environ = dict.fromkeys(spec["secrets"], "the-run-key")
        assert "VLLM_API_KEY" in environ
        own, extra = split_passthrough(list(command[command.index("--backend") :]))
        parser = build_parser()
        assert options_from_args(parser.parse_args(own), extra, parser, environ).host == "0.0.0.0"
        with pytest.raises(SystemExit):  # the key is what lets it start
            options_from_args(parser.parse_args(own), extra, parser, {})
    assert all(re.search(r"(^| |=)--adapter-push( |$)", " ".join(c)) for c in proxies)
    specs = dry_run(
        "--code", "image", "--topology", topology, "--no-adapter-push", monkeypatch=monkeypatch
    )
    text = json.dumps([s["command"] for s in specs])
    assert "--adapter-receiver" not in text.replace("--no-adapter-receiver", "")
    assert "--adapter-push" not in text.replace("--no-adapter-push", "")
    assert text.count("--no-adapter-receiver") == 2
    assert text.count("--no-adapter-push") == (1 if topology == "sidecar" else 2)


def test_image_code_runs_the_entry_points_directly(monkeypatch: pytest.MonkeyPatch) -> None:
    specs = dry_run("--code", "image", "--replica-image", "me/rollout:1", monkeypatch=monkeypatch)

    assert specs[0]["image"] == "me/rollout:1"
    assert specs[0]["command"][:4] == ["python3", "-m", "replica_entry", "--backend"]


@pytest.mark.parametrize(
    ("flag", "value", "message"),
    [
        ("--bucket", "no-namespace", "must look like NAMESPACE/BUCKET"),
        ("--run-name", "Bad_Name", "--run-name: 1-40 lowercase letters"),
        ("--replica-count", "0", "--replica-count: must be at least 1"),
        ("--mount-path", "lora", "--mount-path: must be absolute"),
        ("--attempts", "0", "--attempts: must be at least 1 (got 0)"),
    ],
)
def test_bad_flags_exit_2_naming_the_flag(
    flag: str, value: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = [*ARGS, "--dry-run", flag, value]
    with pytest.raises(SystemExit) as exit_info:
        main(argv, Runtime(clock=FakeClock(), token=_no_token, publish=_no_publish))
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def test_the_proxy_discovers_replicas_in_the_jobs_namespace(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    specs = dry_run(
        "--topology", "job", "--namespace", "jobs-org", "--network", "public",
        monkeypatch=monkeypatch,
    )  # fmt: skip

    proxy = next(spec for spec in specs if spec["role"] == "proxy")
    assert "--discover-namespace jobs-org" in proxy["command"][2]
    assert {spec["namespace"] for spec in specs} == {"jobs-org"}
    assert [volume["source"] for volume in proxy["volumes"]] == ["team/rl"]


def test_the_trainer_defaults_to_the_published_two_gpus_and_starts_both(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    specs = dry_run(monkeypatch=monkeypatch)

    assert specs[-1]["flavor"] == "h200x2"
    assert (
        "python3 -m trainer_entry --model Qwen/Qwen2.5-Math-1.5B --num-processes 2 "
        in (specs[-1]["command"][2])
    )


def test_a_multi_gpu_trainer_flavor_starts_every_gpu(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    runtime_err = io.StringIO()
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    argv = [*ARGS, "--dry-run", "--trainer-flavor", "h200x4", *TRAINER_ARGS]
    runtime = Runtime(clock=FakeClock(), token=_no_token, publish=_no_publish, err=runtime_err)
    runtime.out = io.StringIO()

    assert main(argv, runtime) == 0
    trainer = json.loads(runtime.out.getvalue())[-1]
    assert " --num-processes 4 " in trainer["command"][2]
    assert "idle" not in runtime_err.getvalue()
    single = dry_run("--trainer-flavor", "a100-large", monkeypatch=monkeypatch)[-1]
    assert " --num-processes 1 " in single["command"][2]


@pytest.mark.parametrize(
    ("timeout", "trainer", "replicas"),
    [("2h", "2h", "150m"), ("90m", "90m", "2h"), ("1.5h", "90m", "2h"), ("3600s", "1h", "90m")],
)
def test_replicas_outlive_the_trainer_by_the_start_up_wait(
    timeout: str, trainer: str, replicas: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    specs = dry_run("--timeout", timeout, "--ready-timeout", "1800", monkeypatch=monkeypatch)

    assert [spec["timeout"] for spec in specs] == [replicas, replicas, trainer]


def test_in_topology_job_replicas_also_outlive_the_proxy_wait(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    specs = dry_run(
        "--topology", "job", "--timeout", "1h", "--ready-timeout", "600",
        monkeypatch=monkeypatch,
    )  # fmt: skip

    assert {spec["role"]: spec["timeout"] for spec in specs} == {
        "replica": "80m",
        "proxy": "70m",
        "trainer": "1h",
    }


def test_attempts_apply_to_every_job(monkeypatch: pytest.MonkeyPatch) -> None:
    specs = dry_run("--topology", "job", "--attempts", "1", monkeypatch=monkeypatch)
    assert [spec["attempts"] for spec in specs] == [1, 1, 1, 1]


def test_the_dry_run_says_what_the_plan_costs_per_hour_and_at_most(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The README's $25.00 per hour and $157.50 at most, reproduced without a launch (issue 49,
    point 6): the specs stay JSON on stdout, the cost line goes to stderr."""
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    out, err = io.StringIO(), io.StringIO()
    runtime = Runtime(clock=FakeClock(), token=_no_token, publish=_no_publish, out=out, err=err)
    argv = ["up", "--bucket", "team/rl", "--model", "m", "--replica-count", "3", "--dry-run",
            *TRAINER_ARGS]  # fmt: skip
    assert main(argv, runtime) == 0
    assert len(json.loads(out.getvalue())) == 4
    assert err.getvalue() == (
        "this plan costs $25.00 per hour (3 x h200, 1 x h200x2); its time caps bound it at "
        "$157.50 if nobody stops it (each job run once for its whole timeout)\n"
    )


def test_a_plan_with_a_flavor_without_a_price_sets_no_bound() -> None:
    specs = [JobSpec("r", "replica", "i", (), "h200", "1h", (), {}),
             JobSpec("t", "trainer", "i", (), "b300", "1h", (), {})]  # fmt: skip
    assert plan_cost(specs) == (
        "this plan costs $5.00 per hour (1 x h200, 1 x b300), plus b300 (no price here: `hf jobs "
        "hardware` lists it); no bound without every flavor's price"
    )
