"""``python -m deploy rehearse``: the plan's exact jobs run here, until the trainer trained.

The first ``deploy up`` of docs/deploy.md (the default plan: sidecar topology, private network),
with one replica instead of three (each vLLM CPU engine costs a minute and a core here), and the
same plan in topology ``job``. Each rehearsal makes its images as fresh environments layered on
this tier's (never writing to it), installs what each job installs (from the registry where the
image lacks it), gives each job a network namespace and the bucket at ``/lora``, and must end
with the trainer's adapters loaded on the replica. Two of them run at once, as two people (or two
CI jobs) on one machine do: each has its own ``/lora`` and namespaces, and each test asserts only
what its own rehearsal made. Needs root (namespaces, bind mounts), as CI has.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest

from deploy.install import VLLM_IMAGE, project_version, source_root
from deploy.plan_jobs import replica_spec, trainer_spec
from deploy.rehearsal import images, jobs
from deploy.rehearsal.bridge import Bridge
from deploy.rehearsal.network import Group, listed_names, owner_of
from deploy.rehearsal.run import Rehearsal, failed
from deploy.rehearsal.starter import Starter
from deploy.rehearsal.tunnel import Tunnel
from deploy.wheel import build_wheel
from tests.e2e.rehearsals import plan_of, readme_plan

REHEARSAL_TIMEOUT_S = 900
STARTED = r"^started (?:math-r1-)?(\S+) \((\S+)\) at 10\.231\.\d+\.\d+, aliases (\S*):"
NETWORK = r"^network: bridge rp([0-9a-f]{2})br on 10\.231\.\d+\.0/24"
pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the rehearsal needs root")


def _start(argv: list[str], workdir: Path) -> subprocess.Popen[str]:
    """``deploy rehearse`` of ``argv`` in ``workdir``, its output in files there."""
    split = argv.index("--")
    command = [
        *(sys.executable, "-m", "deploy", "rehearse", *argv[:split]),
        *("--image-base", sys.executable, "--workdir", str(workdir / "run"), "--steps", "1"),
        *argv[split:],
    ]
    with (workdir / "out.txt").open("w") as out, (workdir / "err.txt").open("w") as err:
        return subprocess.Popen(command, stdout=out, stderr=err, text=True)


def _finish(run: subprocess.Popen[str], workdir: Path, deadline: float) -> tuple[int, str, str]:
    """Its exit code and output, once it ended (by ``deadline``, else stopped by SIGTERM: the
    rehearsal takes its jobs and namespaces down first)."""
    try:
        code = run.wait(max(deadline - time.monotonic(), 1))
    except subprocess.TimeoutExpired:
        run.send_signal(signal.SIGTERM)
        code = run.wait(120)
    return code, (workdir / "out.txt").read_text(), (workdir / "err.txt").read_text()


def _own_leftovers(out: str, workdir: Path) -> list[str]:
    """What this rehearsal made that is still there: namespaces and links named by its id (as it
    printed it), mounts of its work folder in this mount namespace. Another's are not its own."""
    found = re.search(NETWORK, out, flags=re.M)
    assert found, out[-3000:]
    mine = int(found.group(1), 16)
    links, netns = (subprocess.run(["ip", *args], capture_output=True, text=True, check=True)
                    for args in (["-o", "link"], ["netns", "list"]))  # fmt: skip
    left = [name for name in listed_names(links.stdout, netns.stdout) if owner_of(name) == mine]
    mounts = Path("/proc/self/mountinfo").read_text().splitlines()
    return left + [line for line in mounts if str(workdir) in line]


PLANS = {
    "default-plan": ((), ["replica-0", "trainer"], "$15.00 per hour (1 x h200, 1 x h200x2)"),
    # Topology job, and the trainer as two one-GPU jobs meeting at node 0's alias ...
    "job-topology-two-trainer-nodes": (
        ("--topology", "job", "--trainer-nodes", "2", "--trainer-flavor", "h200"),
        # ... and, once the trainer is done, the proxy job run again (a retry).
        ["replica-0", "proxy", "trainer", "trainer-1", "proxy"],
        "$15.03 per hour (3 x h200, 1 x cpu-upgrade)",
    ),
    # The run on a shared fleet: the fleet's replica and proxy job, then the run's trainer,
    # which declares itself on the fleet's proxy and trains at /runs/math-r1.
    "run-on-a-shared-fleet": (
        ("--fleet", "sweep"),
        ["sweep-replica-0", "sweep-proxy", "trainer"],
        "$15.03 per hour (1 x h200, 1 x cpu-upgrade, 1 x h200x2)",
    ),
}


def _check(plan: str, code: int, out: str, err: str, workdir: Path) -> None:
    """What the rehearsal of ``PLANS[plan]`` in ``workdir`` must have done, and left."""
    changes, jobs_started, cost = PLANS[plan]
    print(f"{plan}:\n{out[-3000:]}")
    assert code == 0, out[-4000:] + err[-4000:]
    # Every job ran as planned, in launch order, on the private network.
    started = re.findall(STARTED, out, flags=re.M)
    assert [name for name, _, _ in started] == jobs_started
    images_of = {name: image for name, image, _ in started}
    assert len(images_of) == len(set(jobs_started))
    replica = jobs_started[0]
    assert images_of[replica] == images_of["trainer"] == "vllm/vllm-openai:v0.32.0"
    proxies = [name for name in images_of if name.endswith("proxy")]
    assert all(images_of[name] == "python:3.11-slim" for name in proxies)
    trainer_alias = "math-r1-trainer" if "--fleet" in changes else "trainer"
    assert {name: alias for name, _, alias in started}["trainer"] == trainer_alias
    # The trainer's versions reached the replica through the proxy, then it exited 0.
    assert re.search(r"trainer: trl-policy-v2 loaded on 1 replica", out)
    assert "trained 1 step(s) through the proxy and exited 0" in out
    assert f"costs about {cost} while it runs" in out
    # The trainer is online to the rehearsal's Hub: it asked it for nothing (no download).
    assert "bridge: answered 0 Jobs API call(s), started 0 job(s) for them, refused 0 other" in out
    # The bucket folder holds what the trainer wrote at /lora/math-r1 inside its job.
    run_dir = workdir / "run" / "bucket" / "math-r1"
    assert (run_dir / ".vllm_lora" / "trl-policy-v2").is_dir()
    assert list(run_dir.glob("checkpoint-*"))
    logs = workdir / "run" / "logs"
    if "--fleet" in changes:  # declared on the fleet's proxy before training, removed after
        trained = (logs / "math-r1-trainer.log").read_text()
        assert "run math-r1 declared on the fleet's proxy" in trained
        assert "run math-r1 removed from the fleet's proxy" in trained
    if "trainer-1" in jobs_started:  # two machines, one rank each, met at the alias
        assert "rank 1 of 2: DistributedType.FSDP" in (logs / "math-r1-trainer-1.log").read_text()
        # The proxy job killed and run again in a fresh container: its window came back from
        # its state file in the bucket.
        assert re.search(r"math-r1-proxy: its retry took back trl-policy-v\d", out)
        assert list((run_dir / ".proxy-state").glob("adapters-*.json"))
    else:  # h200x2: the published two ranks on one machine
        assert "starting 2 FSDP2 rank(s)" in (logs / "math-r1-trainer.log").read_text()
    # Nothing of its own left behind: no namespace or link, no mount (they all lived in its
    # jobs' mount namespaces; /lora was never made on this machine).
    assert _own_leftovers(out, workdir) == []


def _rehearse_at_once(plans: list[str], workdir: Path) -> None:
    folders = [workdir / plan for plan in plans]
    runs = []
    for plan, folder in zip(plans, folders, strict=True):
        folder.mkdir()
        runs.append(_start(readme_plan(*PLANS[plan][0]), folder))
    deadline = time.monotonic() + REHEARSAL_TIMEOUT_S
    ended = [_finish(run, folder, deadline) for run, folder in zip(runs, folders, strict=True)]
    for plan, folder, (code, out, err) in zip(plans, folders, ended, strict=True):
        _check(plan, code, out, err, folder)


def test_the_readme_plan_on_a_shared_fleet_rehearses_and_trains_through_its_proxy(
    workdir: Path,
) -> None:
    _rehearse_at_once(["run-on-a-shared-fleet"], workdir)


def test_two_rehearsals_at_once_both_pass_each_with_its_own_lora_and_namespaces(
    workdir: Path,
) -> None:
    """Issue 48: two rehearsals on one machine collided on the host's /lora (one removed it
    under the other) and a test asserted that no namespace at all was left. The default plan
    and the job topology (whose proxy job is run again after the other may have ended), at
    once, of the same run name: each trains into its own bucket at its own /lora."""
    _rehearse_at_once(["default-plan", "job-topology-two-trainer-nodes"], workdir)


def test_jobs_of_two_groups_at_once_see_their_own_bucket_and_a_refused_mount_says_so(
    workdir: Path,
) -> None:
    """The plumbing under two rehearsals at once, in seconds: two groups of the same run, a job
    in each writing its group's prefix at /lora/who (the plan's own path, from /): each lands in
    its own bucket. A job whose bucket folder is missing fails before its command begins, and
    is reported as the rehearsal's own setup failing, not the job's."""
    command = 'test "$(pwd)" = / && echo "$HF_NETWORK_GROUP_PREFIX" > /lora/who'
    plan = plan_of()
    spec = replace(trainer_spec(plan), command=("sh", "-c", command))
    groups = [Group("math-r1", workdir / f"{side}.hosts") for side in "ab"]
    runs = [("a", groups[0], True), ("b", groups[1], True), ("c", groups[0], False)]
    started: list[jobs.LocalJob] = []
    try:
        for group in groups:
            group.open()
        for side, group, has_bucket in runs:
            bucket = workdir / side / "bucket"
            (bucket if has_bucket else workdir / side).mkdir(parents=True)
            job = jobs.start(
                spec, group=group, image_bin=Path(sys.executable).parent, bucket_dir=bucket,
                workdir=workdir / side, secrets=plan.secret_values("t", "k"), extra_env={},
            )  # fmt: skip
            started.append(job)
        codes = [job.process.wait(60) for job in started]
    finally:
        for group in groups:
            group.close()
    assert codes[:2] == [0, 0], [job.log_text() for job in started]
    assert groups[0].prefix != groups[1].prefix
    for side, group in zip("ab", groups, strict=True):
        assert (workdir / side / "bucket" / "who").read_text() == f"{group.prefix}\n"
    refused = started[2]
    assert codes[2] != 0 and not refused.command_ran() and started[0].command_ran()
    said = failed(refused.spec.name, f"exited with code {codes[2]}", refused.tail(),
                  refused.log_path, refused.command_ran())  # fmt: skip
    assert "before its command began" in str(said), str(said)


def test_a_trainer_image_without_vllm_stops_its_job_in_one_line(workdir: Path) -> None:
    """The trainer image before issue 22 (PyTorch's, no vLLM): its job installs, then stops
    naming the flag to change, before TRL's rollout worker would refuse to start."""
    plan = plan_of("--trainer-image", "pytorch/pytorch:2.6.0-cuda12.4-cudnn9-runtime")
    spec = trainer_spec(plan)
    group = Group("r", workdir / "hosts")
    tunnel = Tunnel()
    root = source_root()
    assert root is not None
    build_wheel(root, workdir / "bucket" / plan.code_dir, project_version("wheel"))
    try:
        group.open()
        registry = tunnel.start(group.gateway)
        image_bin = images.make_environment(spec.image, Path(sys.executable), workdir / "env")
        job = jobs.start(spec, group=group, image_bin=image_bin, bucket_dir=workdir / "bucket",
                         workdir=workdir, secrets=plan.secret_values("t", "k"),
                         extra_env={"HTTPS_PROXY": registry},
                         keep=[images.base_site_packages(Path(sys.executable))])  # fmt: skip
        assert job.process.wait(REHEARSAL_TIMEOUT_S) == 1, job.log_text()
    finally:
        group.close()
        tunnel.close()
    assert job.tail(1) == [
        "rollout-proxy: this image cannot import vllm (TRL's rollout worker refuses to start "
        f"without it): use the vLLM image (--trainer-image {VLLM_IMAGE}) or one built on it"
    ], job.log_text()
    installed = {path.name for path in (workdir / "env").glob("lib/python3*/site-packages/*")}
    assert {"trl", "peft", "kernels"} <= installed  # the install step ran first, and passed


# What a scaler inside the trainer job does, through the real huggingface_hub client: list the
# run's jobs, launch a replica with the spec deploy plans and the replicas' secrets, wait for it
# to run and answer at its alias, cancel it, see it gone. Each step's time goes to its log.
SCALER = """
import json, os, sys, time, urllib.request
from huggingface_hub import HfApi, Volume

began = time.monotonic()
api = HfApi(endpoint=os.environ["HF_ENDPOINT"], token=os.environ["HF_TOKEN"])
ns = api.whoami()["name"]
kwargs = json.loads(os.environ["REPLICA_SPEC"])
kwargs["volumes"] = [Volume(**volume) for volume in kwargs["volumes"]]
run = kwargs["labels"]["rollout-run"]
print("siblings:", [job.labels["name"] for job in api.list_jobs(labels={"rollout-run": run},
                                                                namespace=ns)])
secrets = {name: os.environ[name] for name in ("HF_TOKEN", "VLLM_API_KEY")}
job = api.run_job(**kwargs, secrets=secrets, namespace=ns)
url = "http://" + os.environ["HF_NETWORK_GROUP_PREFIX"] + "replica:8000/v1/models"

def stage():
    return api.inspect_job(job_id=job.id, namespace=ns).status.stage

def answers():
    key = {"Authorization": "Bearer " + os.environ["VLLM_API_KEY"]}
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=key), timeout=2) as got:
            return got.status == 200
    except OSError:
        return False

def until(check, what, timeout_s=60):
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            sys.exit(f"timed out waiting for {what}")
        time.sleep(0.2)
    print(f"{what} after {time.monotonic() - began:.1f} s", flush=True)

until(lambda: stage() == "RUNNING", "RUNNING")
until(answers, "answering at its alias")
api.cancel_job(job_id=job.id, namespace=ns)
until(lambda: stage() == "CANCELED", "CANCELED")
until(lambda: not answers(), "gone from its alias")
lines = list(api.fetch_job_logs(job_id=job.id, namespace=ns))
print("its log:", [line for line in lines if "replica ready on" in line])
"""
BRIDGE_TEST_BUDGET_S = 60.0


def test_a_job_launches_a_replica_through_the_bridge_reaches_it_and_cancels_it(
    workdir: Path,
) -> None:
    """The bridge inside a rehearsal, in about half a minute: the trainer job runs a scaler's
    calls (``SCALER``) with the real client against ``$HF_ENDPOINT``; the replica it launches
    with deploy's planned spec (vLLM's command, which the rehearsal runs as the simulated
    replica, said) is started by the rehearsal's own starter into the group, reached at the
    ``replica`` alias from the trainer's namespace with the run's key, cancelled, and gone."""
    plan = plan_of()
    rehearsal = Rehearsal(plan, Path(sys.executable), workdir, print, replica_backend="sim")
    key = "rehearsal-replica-key"
    spec = replica_spec(plan, 1)  # as `deploy up` plans it: vLLM's command, the Hub's model
    planned = spec.run_job_kwargs(dict.fromkeys(spec.secret_names, ""), plan.namespace)
    replica = {name: planned[name] for name in ("image", "command", "env", "flavor", "timeout",
                                                "name", "labels", "expose", "attempts",
                                                "network_group", "network_aliases")}  # fmt: skip
    replica["volumes"] = [volume.to_dict() for volume in planned["volumes"]]
    env = {"PYTHONUNBUFFERED": "1", "REPLICA_SPEC": json.dumps(replica)}
    scaler = replace(trainer_spec(plan), command=("python3", "-c", SCALER), env=env)
    root = source_root()
    assert root is not None
    group = Group(plan.network_group or plan.run_name, workdir / "hosts")
    tunnel = Tunnel()
    said: list[str] = []
    bridge = Bridge(rehearsal.book, token=rehearsal.token, namespace=plan.namespace,
                    group=group.name, say=said.append)  # fmt: skip
    began = time.monotonic()
    build_wheel(root, workdir / "bucket" / plan.code_dir, project_version("wheel"))
    try:
        group.open()
        starter = Starter(Path(sys.executable), workdir, group, plan.bucket, workdir / "bucket",
                          tunnel.start(group.gateway), bridge.start(group.gateway), said.append,
                          rehearsal.substitutes(plan))  # fmt: skip
        bridge.attach(starter)
        first = starter.launch(scaler, plan.secret_values(rehearsal.token, key))
        rehearsal.book.record(scaler, first)
        code = first.process.wait(2 * BRIDGE_TEST_BUDGET_S)
        took = time.monotonic() - began
    finally:
        bridge.close()
        rehearsal.stop(group)  # every job the book holds
        tunnel.close()
    log = first.log_text()
    print(f"bridge test: {took:.1f} s\n{log[-2000:]}\n" + "\n".join(said))
    assert code == 0, log[-3000:] + "\n".join(said)
    assert "siblings: ['math-r1-trainer']" in log
    for step in ("RUNNING", "answering at its alias", "CANCELED", "gone from its alias"):
        assert f"\n{step} after " in log, step
    assert "its log: ['replica ready on http://0.0.0.0:8000" in log
    launched = [job for job in rehearsal.book.all() if job.origin == "api"]
    assert [job.name for job in launched] == ["math-r1-replica-1"]
    assert launched[0].stage()[0] == "CANCELED"
    assert launched[0].local is not None and launched[0].local.exit_code() is not None
    assert "math-r1-replica-1's command is the plan's: it runs the simulated replica" in "\n".join(
        said
    )
    assert "bridge: math-r1-replica-1 cancelled through the Jobs API: stopped" in "\n".join(said)
    assert rehearsal.token not in log + "\n".join(said) and key not in log
    assert took < BRIDGE_TEST_BUDGET_S
