"""The rehearsal's bridge answers the real huggingface_hub client as the Hub does, starting real
processes: the calls deploy makes (``HubJobs``: launch, inspect, cancel, list by label) and
``fetch_job_logs``, the plan's own jobs listed beside, every refusal one line, every bound.

Without root there are no namespaces: ``LocalRunner`` stands for the rehearsal's starter (each
job's command a plain process of this machine, its log a file), the bridge is the real one.
``tests/e2e/test_rehearsal.py`` runs it inside a rehearsal, with the rehearsal's own starter.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest
from huggingface_hub import HfApi
from huggingface_hub.errors import HfHubHTTPError

from deploy.jobs import HubJobs
from deploy.rehearsal import jobs
from deploy.rehearsal.bridge import Bridge
from deploy.rehearsal.bridge_jobs import Book
from deploy.rehearsal.bridge_specs import wire_spec
from deploy.rehearsal.network import Member
from deploy.specs import (
    INDEX_LABEL,
    ROLE_LABEL,
    RUN_LABEL,
    BucketMount,
    GroupMember,
    JobSpec,
)
from tests.support.background import BackgroundServers
from tests.support.hub_jobs import JobsHub, build_jobs_hub_app
from tests.support.waiting import until

TOKEN = "hf_bridge_0123456789abcdef"
NS = "alice"
GROUP = "r1"
BUCKET = "alice/rollouts"
IMAGE = "python:3.11-slim"
GRACE_S = 5.0  # a job stopped by a cancel: SIGKILL after this (the rehearsal's is 15 s)
STAGE_TIMEOUT_S = 20.0


def _spec(name: str, command: list[str], role: str = "replica", run: str = "r1") -> JobSpec:
    return JobSpec(
        name=name, role="replica" if role == "replica" else "trainer", image=IMAGE,
        command=tuple(command), flavor="cpu-basic", timeout="1h",
        volumes=(BucketMount(BUCKET, "/lora", True),),
        labels={RUN_LABEL: run, ROLE_LABEL: role, INDEX_LABEL: "0"},
        env={"PYTHONUNBUFFERED": "1"}, secret_names=("HF_TOKEN",), expose=(8000,),
        network=GroupMember(GROUP, ("replica",)),
    )  # fmt: skip


@dataclass
class LocalRunner:
    """The bridge's runner without root (module docstring)."""

    workdir: Path
    started: list[jobs.LocalJob] = field(default_factory=list)
    stopped: list[str] = field(default_factory=list)
    start_failure: str | None = None
    refusal_failure: bool = False
    stop_failures: int = 0

    def refusal(self, spec: JobSpec) -> str | None:
        if self.refusal_failure:
            raise RuntimeError("a bug of the runner")
        if spec.image != IMAGE:
            return f"the rehearsal has no stand-in for the image {spec.image}"
        if spec.volumes[0].source != BUCKET:
            return f"the rehearsal has one bucket, {BUCKET}"
        return None

    def start(self, spec: JobSpec, secrets: Mapping[str, str]) -> jobs.LocalJob:
        if self.start_failure is not None:
            raise OSError(self.start_failure)
        folder = self.workdir / f"{spec.name}-{len(self.started)}"
        folder.mkdir(parents=True)
        env = {"PATH": os.environ["PATH"], **spec.env, **secrets}
        with (folder / "log").open("wb") as log:
            process = subprocess.Popen(
                ["sh", "-c", ': > "$0" && exec "$@"', str(folder / "started"), *spec.command],
                stdout=log, stderr=subprocess.STDOUT, env=env, cwd=folder, start_new_session=True,
            )  # fmt: skip
        aliases = spec.network.aliases if spec.network else ()
        member = Member(spec.name, "none", "127.0.0.1", aliases)
        job = jobs.LocalJob(spec, member, folder / "log", process, folder / "started")
        self.started.append(job)
        return job

    def stop(self, job: jobs.LocalJob) -> None:
        if self.stop_failures:
            self.stop_failures -= 1
            raise OSError("the stop failed")
        jobs.stop(job, GRACE_S)
        self.stopped.append(job.spec.name)


@dataclass
class Served:
    bridge: Bridge
    runner: LocalRunner
    said: list[str]
    api: HfApi
    hub: HubJobs

    def launch(self, spec: JobSpec, secrets: Mapping[str, str] | None = None) -> str:
        return self.hub.launch(spec, secrets or {"HF_TOKEN": "value-of-the-secret"}).id

    def stage(self, job_id: str) -> str:
        return self.hub.inspect(job_id).stage

    def wait_stage(self, job_id: str, stage: str) -> None:
        until(lambda: self.stage(job_id) == stage, STAGE_TIMEOUT_S, f"{job_id} {stage}",
              interval=0.05)  # fmt: skip


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    runner = LocalRunner(tmp_path)
    said: list[str] = []
    bridge = Bridge(Book(), token=TOKEN, namespace=NS, group=GROUP, say=said.append)
    url = bridge.start("127.0.0.1")
    bridge.attach(runner)
    api = HfApi(endpoint=url, token=TOKEN)
    try:
        yield Served(bridge, runner, said, api, HubJobs(api, NS))
    finally:
        bridge.close()
        for job in runner.started:
            jobs.stop(job, 0.1)


def _waiter(go: Path, then: str = "exit 0") -> list[str]:
    """A job that says ``up``, waits for the file ``go``, says ``done`` and runs ``then``."""
    loop = f"echo up; while [ ! -e {go} ]; do sleep 0.02; done; echo done; {then}"
    return ["sh", "-c", loop]


def test_a_job_runs_then_completes_as_its_command_does(served: Served, tmp_path: Path) -> None:
    go = tmp_path / "go"
    job_id = served.launch(_spec("r1-replica-1", _waiter(go)))

    served.wait_stage(job_id, "RUNNING")
    go.touch()
    served.wait_stage(job_id, "COMPLETED")

    view = served.hub.inspect(job_id)
    assert (view.name, view.role, view.network) == ("r1-replica-1", "replica", "r1 as replica")
    assert view.expose_urls == (f"https://{job_id}--8000.hf.jobs",)
    assert list(served.api.fetch_job_logs(job_id=job_id, namespace=NS)) == ["up", "done"]
    until(lambda: served.runner.stopped == ["r1-replica-1"], 10, "its end stopped and left DNS")


def test_an_exit_code_is_an_error_with_the_code(served: Served, tmp_path: Path) -> None:
    job_id = served.launch(_spec("r1-replica-1", ["sh", "-c", "exit 3"]))
    served.wait_stage(job_id, "ERROR")
    assert served.hub.inspect(job_id).message == "exited with code 3"


def test_a_cancel_answers_at_once_then_stops_the_job(served: Served, tmp_path: Path) -> None:
    job_id = served.launch(_spec("r1-replica-1", _waiter(tmp_path / "never")))
    served.wait_stage(job_id, "RUNNING")

    served.hub.cancel(job_id)

    assert served.stage(job_id) == "CANCELED"
    (local,) = served.runner.started
    until(lambda: local.exit_code() is not None, 10, "the cancelled job's end")
    assert local.exit_code() == -15  # SIGTERM, as HF Jobs stops a job
    until(lambda: served.runner.stopped == ["r1-replica-1"], 10, "the stop said done")
    assert "bridge: r1-replica-1 cancelled through the Jobs API: stopping it" in served.said
    served.hub.cancel(job_id)  # cancelling again changes nothing
    assert served.stage(job_id) == "CANCELED"


def test_the_plans_jobs_are_listed_by_label_and_a_job_of_it_can_be_cancelled(
    served: Served, tmp_path: Path
) -> None:
    """A scaler adopts what exists: the jobs the rehearsal started from the plan are listed with
    the plan's labels, and one of them may be retired through the API (the rehearsal then does
    not count its end as a failure: ``Book.cancelled``)."""
    plan_spec = _spec("r1-replica-0", _waiter(tmp_path / "never"))
    local = served.runner.start(plan_spec, {"HF_TOKEN": "t"})
    served.bridge.book.record(plan_spec, local)
    trainer = _spec("r1-trainer", ["sleep", "30"], role="trainer")
    served.bridge.book.record(trainer, served.runner.start(trainer, {"HF_TOKEN": "t"}))
    launched = served.launch(_spec("r1-replica-1", _waiter(tmp_path / "never")))
    served.launch(_spec("r2-replica-0", ["true"], run="r2"))

    views = served.hub.of_run("r1")
    replicas = served.hub.labelled(ROLE_LABEL, "replica")

    assert [view.name for view in views] == ["r1-replica-0", "r1-replica-1", "r1-trainer"]
    assert [view.name for view in replicas] == ["r1-replica-0", "r1-replica-1", "r2-replica-0"]
    assert views[1].id == launched
    served.hub.cancel(views[0].id)
    until(lambda: local.exit_code() is not None, 10, "the plan's replica stopped")
    assert served.bridge.book.cancelled(local)


def test_list_jobs_pages_and_filters_by_stage(served: Served, tmp_path: Path) -> None:
    served.bridge.page_size = 2
    ids = [served.launch(_spec(f"r1-replica-{i}", _waiter(tmp_path / "never"))) for i in range(3)]
    for job_id in ids:
        served.wait_stage(job_id, "RUNNING")
    served.hub.cancel(ids[1])

    listed = served.api.list_jobs(labels={RUN_LABEL: "r1"}, namespace=NS)
    running = served.api.list_jobs(status="RUNNING", namespace=NS)

    assert [job.id for job in listed] == ids  # three, over two pages
    assert [job.id for job in running] == [ids[0], ids[2]]


def test_logs_follow_until_the_job_ends(served: Served, tmp_path: Path) -> None:
    go = tmp_path / "go"
    job_id = served.launch(_spec("r1-replica-1", _waiter(go)))
    served.wait_stage(job_id, "RUNNING")
    lines: list[str] = []
    follower = threading.Thread(
        target=lambda: lines.extend(
            served.api.fetch_job_logs(job_id=job_id, namespace=NS, follow=True)
        ),
        daemon=True,
    )
    follower.start()
    until(lambda: lines == ["up"], 10, "the first line, streamed")
    go.touch()
    follower.join(30)
    assert not follower.is_alive() and lines == ["up", "done"]


def test_secrets_reach_the_job_and_no_answer(served: Served, tmp_path: Path) -> None:
    out = tmp_path / "seen"
    command = ["sh", "-c", f'printf %s "$HF_TOKEN" > {out}']
    job_id = served.launch(_spec("r1-replica-1", command), {"HF_TOKEN": "hf_the_secret_value"})
    served.wait_stage(job_id, "COMPLETED")
    assert out.read_text() == "hf_the_secret_value"
    answered = served.api.inspect_job(job_id=job_id, namespace=NS)
    assert answered.secrets == {"HF_TOKEN": None}
    assert "hf_the_secret_value" not in json.dumps(served.bridge.book.get(job_id).spec)  # type: ignore[union-attr]
    assert not any("hf_the_secret_value" in line or TOKEN in line for line in served.said)


def test_the_plan_jobs_wire_form_is_what_the_client_sends(served: Served) -> None:
    spec = _spec("r1-replica-1", ["true"])
    job_id = served.launch(spec)
    sent = served.bridge.book.get(job_id)
    assert sent is not None
    ports = {**sent.spec, "expose": {"ports": sent.spec["expose"]["ports"]}}  # 2.4 adds portsPublic
    assert ports == wire_spec(spec)


def _post(url: str, body: bytes, token: str = TOKEN) -> tuple[int, dict[str, Any]]:
    request = urllib.request.Request(
        url, data=body, headers={"Authorization": f"Bearer {token}",
                                 "Content-Type": "application/json"},
    )  # fmt: skip
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


REFUSED: list[tuple[str, Callable[[JobSpec], JobSpec], str]] = [
    ("role", lambda s: replace(s, labels={RUN_LABEL: "r1"}), "label rollout-role must be one of"),
    ("image", lambda s: replace(s, image="me/mine:1"), "no stand-in for the image me/mine:1"),
    ("bucket", lambda s: replace(s, volumes=(BucketMount("bob/b", "/lora", True),)), "one bucket"),
    ("group", lambda s: replace(s, network=GroupMember("other")), "one network group, r1"),
    ("no group", lambda s: replace(s, network=None), "joins the run's network group"),
    ("volumes", lambda s: replace(s, volumes=()), "exactly one volume"),
]


@pytest.mark.parametrize(("what", "change", "said"), REFUSED, ids=[r[0] for r in REFUSED])
def test_what_the_rehearsal_cannot_run_is_refused_in_one_line(
    served: Served, what: str, change: Callable[[JobSpec], JobSpec], said: str
) -> None:
    with pytest.raises(HfHubHTTPError) as refused:
        served.launch(change(_spec("r1-replica-1", ["true"])))
    assert refused.value.response.status_code == 400
    assert said in str(refused.value) and "\n" not in (refused.value.server_message or "")
    assert served.runner.started == [] and served.bridge.book.all() == []
    assert any(said in line for line in served.said)


def test_the_bounds_answer_and_the_rehearsal_goes_on(served: Served) -> None:
    served.bridge.max_jobs = 1
    served.launch(_spec("r1-replica-1", ["true"]))
    with pytest.raises(HfHubHTTPError) as too_many:
        served.launch(_spec("r1-replica-2", ["true"]))
    status, body = _post(f"{served.bridge.url}/api/jobs/{NS}", b"[" + b" " * 300_000 + b"]")

    assert too_many.value.response.status_code == 429
    assert status == 413 and body["error"]
    until(lambda: len(served.runner.started) == 1, 10, "the one job started")
    assert served.hub.inspect(served.hub.of_run("r1")[0].id).name == "r1-replica-1"


def test_a_wrong_token_another_namespace_and_other_routes_are_refused(served: Served) -> None:
    with pytest.raises(HfHubHTTPError) as wrong:
        HubJobs(HfApi(endpoint=served.bridge.url, token="hf_wrong"), NS).of_run("r1")
    with pytest.raises(HfHubHTTPError) as elsewhere:
        HubJobs(served.api, "bob").of_run("r1")
    with pytest.raises(HfHubHTTPError) as download:
        served.api.model_info("Qwen/Qwen2.5-Math-1.5B")

    assert wrong.value.response.status_code == 401
    assert elsewhere.value.response.status_code == 403
    assert "namespace alice's jobs only" in str(elsewhere.value)
    assert download.value.response.status_code == 404
    assert served.api.whoami()["name"] == NS
    # The Hub's two public routes the client calls with no token: answered, not refused.
    with urllib.request.urlopen(f"{served.bridge.url}/api/agent-harnesses", timeout=10) as got:
        assert json.loads(got.read()) == {"standardEnvVars": [], "harnesses": {}}
    ping = urllib.request.Request(f"{served.bridge.url}/api/telemetry/trl/other", method="HEAD")
    with urllib.request.urlopen(ping, timeout=10) as got:
        assert got.status == 200
    assert served.bridge.refusals == 2
    assert (
        "bridge: refused GET /api/models/Qwen/Qwen2.5-Math-1.5B: the rehearsal's Hub serves "
        "the Jobs API only"
    ) in served.said
    assert served.bridge.summary().endswith("refused 2 other request(s)")


def test_a_failing_start_is_an_error_stage_and_a_failing_handler_a_500(served: Served) -> None:
    served.runner.start_failure = "no room for another namespace"
    job_id = served.launch(_spec("r1-replica-1", ["true"]))
    served.wait_stage(job_id, "ERROR")
    assert served.hub.inspect(job_id).message == "no room for another namespace"

    served.runner.refusal_failure = True
    with pytest.raises(HfHubHTTPError) as failed:
        served.launch(_spec("r1-replica-2", ["true"]))
    assert failed.value.response.status_code == 500
    assert any("answered 500, the rehearsal goes on" in line for line in served.said)
    assert served.stage(job_id) == "ERROR"  # still answering


def test_the_watcher_survives_a_failed_stop(served: Served, tmp_path: Path) -> None:
    served.runner.stop_failures = 1
    first = served.launch(_spec("r1-replica-1", ["true"]))
    served.wait_stage(first, "COMPLETED")
    until(lambda: any("stopping r1-replica-1 failed" in line for line in served.said), 10,
          "the failed stop said")  # fmt: skip
    second = served.launch(_spec("r1-replica-2", _waiter(tmp_path / "never")))
    served.wait_stage(second, "RUNNING")
    served.hub.cancel(second)
    until(lambda: "r1-replica-2" in served.runner.stopped, 10, "the next stop")


@pytest.fixture(params=["stand-in", "bridge"])
def either(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[tuple[HfApi, Callable[..., str]]]:
    """The tests' stand-in and the bridge, each with a way to make a job of a spec."""
    if request.param == "bridge":
        served = request.getfixturevalue("served")
        served.bridge.page_size = 2
        yield served.api, lambda spec: served.launch(spec)
        return
    hub = JobsHub(token=TOKEN, page_size=2)
    servers = BackgroundServers()
    try:
        api = HfApi(endpoint=servers.start(build_jobs_hub_app(hub)), token=TOKEN)
        yield api, lambda spec: hub.create(NS, wire_spec(spec)).id
    finally:
        servers.close()


def test_the_stand_in_and_the_bridge_answer_alike(
    either: tuple[HfApi, Callable[..., str]], tmp_path: Path
) -> None:
    api, make = either
    ids = [make(_spec(f"r1-replica-{i}", _waiter(tmp_path / "never"))) for i in range(3)]
    make(_spec("r2-replica-0", ["true"], run="r2"))

    listed = list(api.list_jobs(labels={RUN_LABEL: "r1"}, namespace=NS))
    one = api.inspect_job(job_id=ids[1], namespace=NS)
    api.cancel_job(job_id=ids[1], namespace=NS)

    assert [job.id for job in listed] == ids
    assert one.labels == {RUN_LABEL: "r1", ROLE_LABEL: "replica", INDEX_LABEL: "0",
                          "name": "r1-replica-1"}  # fmt: skip
    assert one.owner.name == NS and one.secrets == {"HF_TOKEN": None}
    assert one.network is not None and one.network.aliases == ["replica"]
    assert one.retry == 0 and one.expose == [8000]
    assert api.inspect_job(job_id=ids[1], namespace=NS).status.stage == "CANCELED"
    with pytest.raises(HfHubHTTPError) as missing:
        api.inspect_job(job_id="0" * 24, namespace=NS)
    assert missing.value.response.status_code == 404
