"""``deploy up`` with the real huggingface_hub client against the Jobs stand-in."""

from __future__ import annotations

import json
import shlex

from tests.deploy.conftest import TOKEN, WHEEL, Stand
from tests.support.hub_jobs import Step
from trainer_entry import flags, freeze

UP = ("up", "--bucket", "alice/rl", "--model", "Qwen/Qwen2.5-Math-1.5B", "--run-name", "r1")


def test_sidecar_up_sends_the_specs_and_waits_for_health(stand: Stand) -> None:
    urls = stand.fleet(2)
    stand.hub.script("r1-replica-1", Step("SCHEDULING", seconds=15), "RUNNING")

    result = stand.cli(
        *UP,
        "--replica-count",
        "2",
        "--network",
        "public",
        "--",
        "--dataset",
        "d",
        "--max-steps",
        "500",
    )

    assert result.code == 0, result.err
    assert stand.hub.buckets.buckets["alice/rl"].private is True
    assert stand.uploaded() == WHEEL
    replica = stand.hub.named("r1-replica-0").spec
    assert replica["dockerImage"] == "vllm/vllm-openai:v0.32.0"
    assert replica["flavor"] == "h200"
    assert replica["timeoutSeconds"] == 6 * 3600 + 1800
    assert replica["secrets"] == {"HF_TOKEN": TOKEN}
    assert replica["expose"]["ports"] == [8000]
    assert replica["volumes"] == [
        {"type": "bucket", "source": "alice/rl", "mountPath": "/lora", "readOnly": True}
    ]
    assert replica["labels"] == {
        "rollout-run": "r1",
        "rollout-role": "replica",
        "rollout-replicas": "r1",
        "rollout-index": "0",
        "name": "r1-replica-0",
    }
    script = replica["command"][2]
    assert replica["command"][:2] == ["sh", "-c"]
    assert "pip install --no-cache-dir --quiet --no-deps /lora/r1/code/rollout_proxy-" in script
    assert "exec python3 -m replica_entry --backend vllm --host 0.0.0.0 --port 8000" in script
    assert "--model Qwen/Qwen2.5-Math-1.5B" in script
    trainer = stand.hub.named("r1-trainer").spec
    assert trainer["flavor"] == "h200x2"
    assert trainer["volumes"][0]["readOnly"] is False
    assert trainer["volumes"][0]["mountPath"] == "/lora"
    assert trainer["expose"]["ports"] == [8000]
    assert f"--replica-urls {urls[0]},{urls[1]}" in trainer["command"][2]
    assert "--output-dir /lora/r1 --dataset d --max-steps 500" in trainer["command"][2]
    assert "--no-deps /lora/r1/code/rollout_proxy-" in trainer["command"][2]
    assert "r1-replica-1 (000000000000000066500002): SCHEDULING" in result.out
    assert f"RUNNING, {urls[1]} healthy" in result.out
    assert result.out.count("r1-replica-1 (000000000000000066500002): SCHEDULING") == 1
    assert "python -m deploy down --run-name r1 --namespace alice" in result.out
    assert "python -m deploy logs --run-name r1" in result.out
    sidecar = stand.hub.exposed["r1-trainer"]  # the trainer job's exposed sidecar
    assert f"rollout-proxy top {sidecar}" in result.out
    assert f"{sidecar}/metrics with 'Authorization: Bearer <HF token>'" in result.out
    assert TOKEN not in result.out + result.err
    assert stand.hub.cancelled == []
    # Every job may be run again by HF Jobs when it fails: 3 runs in all unless --attempts.
    assert {job.name: job.spec["attempts"] for job in stand.hub.jobs.values()} == {
        "r1-replica-0": 3, "r1-replica-1": 3, "r1-trainer": 3,
    }  # fmt: skip


def test_sidecar_up_is_not_ready_until_its_proxy_routes_to_every_replica(stand: Stand) -> None:
    urls = [stand.replica(f"r1-replica-{index}") for index in range(2)]
    trainer_url = stand.proxy("r1-trainer", urls, refused=[urls[1]])

    result = stand.cli(*UP, "--replica-count", "2", "--ready-timeout", "60", "--network", "public")

    assert result.code == 1, result.out
    assert "is up" not in result.out
    assert (
        f"r1-trainer (job 000000000000000066500003): RUNNING, {trainer_url} its proxy routes to "
        f"1/2 replicas ({urls[1]}: probe answered HTTP 401 (check --upstream-token))"
    ) in result.err
    assert "the trainer's proxy does not reach every replica" in result.err
    assert "read access to the namespace alice" in result.err
    assert "python -m deploy logs --run-name r1 --namespace alice" in result.err
    assert stand.hub.named("r1-trainer").stage == "CANCELED"
    trainer = stand.hub.named("r1-trainer").spec
    assert trainer["expose"]["ports"] == [8000]
    assert "--sidecar-host 0.0.0.0 --sidecar-port 8000" in trainer["command"][2]
    assert "--replica-token-env HF_TOKEN" in trainer["command"][2]


def test_job_topology_launches_the_proxy_then_the_trainer_pointed_at_it(stand: Stand) -> None:
    urls = [stand.replica(f"r1-replica-{index}") for index in range(2)]
    proxy_url = stand.proxy("r1-proxy", urls)

    result = stand.cli(*UP, "--replica-count", "2", "--topology", "job", "--network", "public")

    assert result.code == 0, result.err
    proxy = stand.hub.named("r1-proxy").spec
    assert proxy["dockerImage"] == "python:3.11-slim"
    assert proxy["secrets"] == {"HF_TOKEN": TOKEN, "PROXY_UPSTREAM_TOKEN": TOKEN}
    assert proxy["volumes"][0] == {  # writable for its state file alone
        "type": "bucket",
        "source": "alice/rl",
        "mountPath": "/lora",
        "readOnly": False,
    }
    assert proxy["expose"]["ports"] == [8000]
    assert f"--replica-urls {urls[0]},{urls[1]}" in proxy["command"][2]
    assert "--adapters-dir /lora/r1/.vllm_lora" in proxy["command"][2]
    trainer = stand.hub.named("r1-trainer").spec["command"][2]
    assert f"--proxy-url {proxy_url} --proxy-token-env HF_TOKEN" in trainer
    assert (
        f"r1-proxy (000000000000000066500003): RUNNING, {proxy_url} its proxy routes to 2/2 "
        "replicas"
    ) in result.out

    status = stand.cli("status", "--run-name", "r1", "--namespace", "alice")
    assert status.code == 0, status.err
    assert f"{urls[0]} healthy" in status.out
    assert "routing: policy prefix, inflight 3, queued 0, tracked_prefixes 12" in status.out
    assert "adapters: newest trl-policy-v7, 1 wanted, 0 loading, window 5" in status.out
    assert "replicas: 2/2 routable" in status.out


def test_a_replica_in_error_cancels_the_others_with_its_logs(stand: Stand) -> None:
    stand.replica("r1-replica-0")
    stand.replica("r1-replica-2")
    stand.hub.script(
        "r1-replica-1",
        "SCHEDULING",
        "RUNNING",
        Step("ERROR", "exit code 1"),
        logs=["loading model", "torch.OutOfMemoryError: CUDA out of memory"],
    )

    result = stand.cli(*UP, "--replica-count", "3")

    assert result.code == 1
    assert "r1-replica-1 (job 000000000000000066500002) ended in ERROR: exit code 1" in result.err
    assert "| torch.OutOfMemoryError: CUDA out of memory" in result.err
    assert "cancelled the other job(s) of the run: r1-replica-0, r1-replica-2" in result.err
    assert "then run `deploy up` again" in result.err
    assert sorted(stand.hub.jobs[i].name for i in stand.hub.cancelled) == [
        "r1-replica-0",
        "r1-replica-2",
    ]
    assert "r1-trainer" not in {job.name for job in stand.hub.jobs.values()}


def test_keep_leaves_the_other_jobs_running(stand: Stand) -> None:
    stand.replica("r1-replica-0")
    stand.hub.script("r1-replica-1", "SCHEDULING", "ERROR")

    result = stand.cli(*UP, "--replica-count", "2", "--keep")

    assert result.code == 1
    assert "kept 2 job(s) running (--keep)" in result.err
    assert "python -m deploy down --run-name r1 --namespace alice" in result.err
    assert stand.hub.cancelled == []
    assert stand.hub.named("r1-replica-0").stage != "CANCELED"


def test_an_unhealthy_replica_times_out_with_a_clear_message(stand: Stand) -> None:
    stand.replica("r1-replica-0", unhealthy=True)

    result = stand.cli(*UP, "--replica-count", "1", "--ready-timeout", "60", "--poll-interval", "5")

    assert result.code == 1
    assert "not ready after 60 s (--ready-timeout 60)" in result.err
    assert "/health not ready yet (HTTP 503)" in result.err
    assert "raise --ready-timeout" in result.err
    assert stand.hub.named("r1-replica-0").stage == "CANCELED"
    assert max(stand.clock.slept) <= 5


def test_the_health_wait_sends_the_bearer_token(stand: Stand) -> None:
    stand.replica("r1-replica-0", token="some-other-token")

    result = stand.cli(*UP, "--replica-count", "1", "--ready-timeout", "10")

    assert result.code == 1
    assert "/health not ready yet (HTTP 401 (token refused))" in result.err


def test_a_run_name_with_active_jobs_is_refused(stand: Stand) -> None:
    stand.fleet(1)
    assert stand.cli(*UP, "--replica-count", "1").code == 0

    again = stand.cli(*UP, "--replica-count", "1")

    assert again.code == 1
    assert "run 'r1' already has 2 active job(s)" in again.err
    assert "python -m deploy down --run-name r1" in again.err
    assert len(stand.hub.jobs) == 2


def test_down_cancels_every_job_of_the_run(stand: Stand) -> None:
    stand.fleet(2)
    assert stand.cli(*UP, "--replica-count", "2").code == 0
    stand.hub.jobs[next(iter(stand.hub.jobs))].move_to("ERROR")

    result = stand.cli("down", "--run-name", "r1", "--namespace", "alice")

    assert result.code == 0, result.err
    assert "r1-replica-0 (job 000000000000000066500001): already ERROR" in result.out
    assert "r1-trainer (job 000000000000000066500003): cancelled (was RUNNING)" in result.out
    assert {job.stage for job in stand.hub.jobs.values()} == {"ERROR", "CANCELED"}
    assert len(stand.hub.cancelled) == 2
    assert stand.cli("down", "--run-name", "other").code == 1


def test_logs_prints_each_jobs_lines(stand: Stand) -> None:
    stand.fleet(1)
    stand.hub.script("r1-replica-0", "RUNNING", logs=[f"line {n}" for n in range(10)])
    assert stand.cli(*UP, "--replica-count", "1").code == 0
    # A job's log stream stays open while it runs (the client then reads for 5 s): an ended one.
    stand.hub.named("r1-replica-0").move_to("ERROR", "exit code 1")

    result = stand.cli("logs", "--run-name", "r1", "--role", "replica", "--tail", "2")

    assert result.code == 0, result.err
    assert "== r1-replica-0 (job 000000000000000066500001, ERROR) ==" in result.out
    assert "[r1-replica-0] line 8\n[r1-replica-0] line 9\n" in result.out
    assert "line 7" not in result.out and "Job started" not in result.out


def test_without_a_token_up_says_how_to_log_in(stand: Stand) -> None:
    result = stand.cli(*UP, "--replica-count", "1", token=None)

    assert result.code == 1
    assert "hf auth login" in result.err
    assert stand.hub.jobs == {}


def test_a_refused_token_names_the_fix(stand: Stand) -> None:
    result = stand.cli(*UP, "--replica-count", "1", token="hf_wrong")

    assert result.code == 1
    assert "the Hub call failed" in result.err and "401" in result.err
    assert "hf auth whoami" in result.err
    assert "hf_wrong" not in result.err


def test_logs_follow_streams_until_the_job_ends(stand: Stand) -> None:
    stand.fleet(1)
    stand.hub.script("r1-trainer", "RUNNING", logs=["step 1", "step 2"])
    assert stand.cli(*UP, "--replica-count", "1").code == 0
    stand.hub.named("r1-trainer").move_to("COMPLETED")

    result = stand.cli("logs", "--run-name", "r1", "--role", "trainer", "--follow")

    assert result.code == 0, result.err
    assert result.out == "[r1-trainer] step 1\n[r1-trainer] step 2\n"
    missing = stand.cli("logs", "--run-name", "r1", "--role", "proxy")
    assert missing.code == 1
    assert "no job of run r1 in namespace alice matches" in missing.err
    assert "python -m deploy status --run-name r1" in missing.err


REFUSED = "probe answered HTTP 401 (check --upstream-token)"  # the proxy's reason


def test_status_shows_why_the_sidecar_does_not_reach_the_replicas(stand: Stand) -> None:
    urls = stand.fleet(2)
    assert stand.cli(*UP, "--replica-count", "2").code == 0
    # Later the replicas refuse the trainer's token (say, it was revoked): what status shows.
    stand.proxy("r1-trainer", urls, refused=urls)

    result = stand.cli("status", "--run-name", "r1", "--namespace", "alice")

    assert result.code == 0, result.err
    trainer_url = stand.hub.exposed["r1-trainer"]
    assert f"RUNNING  {trainer_url} unhealthy (HTTP 503)" in result.out
    assert (
        f"replicas: 0/2 routable ({urls[0]} pending: {REFUSED}, {urls[1]} pending: {REFUSED})"
    ) in result.out
    assert result.out.count(" healthy") == 2  # the replicas themselves answer deploy's probe
    # JobInfo.retry, as the client reads it: the runs HF Jobs may add to the first.
    assert result.out.count("(retried on failure: 3 runs in all)") == 3


def test_a_failed_job_runs_again_as_the_same_job_until_its_attempts_are_spent(
    stand: Stand,
) -> None:
    urls = stand.fleet(1)
    assert stand.cli(*UP, "--replica-count", "1", "--attempts", "2").code == 0
    replica = stand.hub.named("r1-replica-0")
    assert replica.spec["attempts"] == 2
    stand.clock.sleep(60)
    replica.fail("exit code 137")  # the first run dies: HF Jobs runs it again
    first = stand.cli("status", "--run-name", "r1", "--namespace", "alice")
    assert f"r1-replica-0                 job {replica.id}" in first.out
    assert "SCHEDULING" in first.out.splitlines()[1]  # the same job, its script from the start
    stand.clock.sleep(60)
    again = stand.cli("status", "--run-name", "r1", "--namespace", "alice")
    assert f"RUNNING  {urls[0]} healthy" in again.out
    assert (
        "exit code 137: run 2 of 2"
        in stand.cli("logs", "--run-name", "r1", "--role", "replica").out
    )
    replica.fail("exit code 137")  # the second, its last
    spent = stand.cli("status", "--run-name", "r1", "--namespace", "alice")
    assert "ERROR (exit code 137)" in spent.out.splitlines()[1]


def test_an_existing_public_bucket_is_refused(stand: Stand) -> None:
    stand.fleet(1)
    stand.hub.buckets.create("alice/rl", private=False)

    result = stand.cli(*UP, "--replica-count", "1")

    assert result.code == 1
    assert "bucket alice/rl exists and is public" in result.err
    assert "the wheel and every adapter of the run would be readable by anyone" in result.err
    assert f"{stand.url}/buckets/alice/rl" in result.err and "--allow-public-bucket" in result.err
    assert stand.hub.jobs == {}
    assert stand.hub.buckets.buckets["alice/rl"].files == {}


def test_a_public_bucket_is_used_only_when_allowed(stand: Stand) -> None:
    stand.fleet(1)
    stand.hub.buckets.create("alice/rl", private=False)

    result = stand.cli(*UP, "--replica-count", "1", "--allow-public-bucket")

    assert result.code == 0, result.err
    assert "bucket alice/rl is public (--allow-public-bucket)" in result.out
    assert stand.uploaded() == WHEEL


def test_down_names_the_namespaced_cancel_command_when_a_cancel_fails(stand: Stand) -> None:
    stand.fleet(1)
    assert stand.cli(*UP, "--replica-count", "1").code == 0
    trainer = stand.hub.named("r1-trainer")
    stand.hub.uncancellable.add(trainer.id)

    result = stand.cli("down", "--run-name", "r1", "--namespace", "alice")

    assert result.code == 1
    assert f"hf jobs cancel alice/{trainer.id}" in result.err


def test_a_trainer_job_run_again_resumes_from_the_runs_checkpoints(stand: Stand) -> None:
    """HF Jobs runs a failed trainer job again with the same command: ``trainer_entry`` reads it
    as resume-from-the-newest-checkpoint in the bucket's run folder (that resume, its adapter
    names continuing, is proven for real in tests/e2e/test_training_ranks.py)."""
    stand.fleet(2)
    assert stand.cli(*UP, "--replica-count", "2").code == 0
    trainer = stand.hub.named("r1-trainer")
    planned = json.dumps(trainer.spec, sort_keys=True)

    trainer.fail("exit code 1")

    assert (trainer.runs, trainer.stage) == (2, "SCHEDULING")  # run again, from the start
    assert json.dumps(trainer.spec, sort_keys=True) == planned
    command = shlex.split(trainer.spec["command"][2].rsplit("&& exec ", 1)[1])
    parser = flags.build_parser()
    environ = dict.fromkeys(trainer.spec["secrets"], "<secret>")
    options = freeze.options_from_args(parser.parse_args(command[3:]), parser, environ, here=False)
    assert options.checkpoints.resume == "auto"
    assert str(options.output_dir) == "/lora/r1"  # the bucket, which outlives the job
    status = stand.cli("status", "--run-name", "r1", "--namespace", "alice")
    assert "r1-trainer" in status.out
    assert "(retried on failure: 3 runs in all)" in status.out
