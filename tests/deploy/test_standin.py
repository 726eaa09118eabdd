"""The Hub stand-in answers as the real service does, for the real huggingface_hub client.

Each test pins one behaviour of the service that the deploy tests rely on (read from the
client's own code: ``hf_api.py``, ``_jobs_api.py``, ``utils/_pagination.py``, and hf_xet's CAS
client), so a deploy test passing against the stand-in means something about the real Hub.
"""

from __future__ import annotations

import json
import queue
import threading
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from huggingface_hub import HfApi
from huggingface_hub.errors import HfHubHTTPError

from tests.deploy.conftest import TOKEN
from tests.support.background import BackgroundServers
from tests.support.clock import SteppingClock as FakeClock
from tests.support.hub_jobs import JobsHub, Step, build_jobs_hub_app

SPEC = {"dockerImage": "python:3.12", "command": ["true"], "labels": {"run": "x"}}


@pytest.fixture
def hub() -> JobsHub:
    return JobsHub(token=TOKEN)


@pytest.fixture
def hub_url(hub: JobsHub, servers: BackgroundServers) -> str:
    return servers.start(build_jobs_hub_app(hub))


@pytest.fixture
def api(hub_url: str) -> HfApi:
    return HfApi(endpoint=hub_url, token=TOKEN)


def _call(url: str, body: Any = None) -> tuple[Any, dict[str, str]]:
    """GET (or POST ``body`` as JSON) with the token; the JSON answer and the headers."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(
        url,
        data=data,
        headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=5.0) as response:
        return json.loads(response.read()), dict(response.headers)


def test_run_job_answers_with_the_exposed_urls(api: HfApi) -> None:
    job = api.run_job(image="python:3.12", command=["true"], expose=[8000], namespace="alice")

    assert job.status.stage == "SCHEDULING"
    assert job.status.expose_urls == [f"https://{job.id}--8000.hf.jobs"]


def test_a_stage_lasts_its_time_whatever_the_calls() -> None:
    clock = FakeClock()
    hub = JobsHub(token=TOKEN, clock=clock.monotonic)
    hub.script("j", Step("SCHEDULING", seconds=10), "RUNNING")
    job = hub.create("alice", {**SPEC, "labels": {"name": "j"}})

    seen = [job.stage for _ in range(5)]
    clock.sleep(9.9)
    before = job.stage
    clock.sleep(0.1)

    assert seen == ["SCHEDULING"] * 5
    assert before == "SCHEDULING"
    assert job.stage == "RUNNING"


def test_list_jobs_pages_with_link_headers(hub: JobsHub, hub_url: str, api: HfApi) -> None:
    hub.page_size = 2
    created = [hub.create("alice", SPEC).id for _ in range(5)]
    hub.create("alice", {**SPEC, "labels": {"run": "other"}})

    page, headers = _call(f"{hub_url}/api/jobs/alice?label=run%3Dx")

    assert len(page) == 2
    assert headers["Link"].startswith(f"<{hub_url}/api/jobs/alice?")
    assert headers["Link"].endswith('>; rel="next"')
    assert [job.id for job in api.list_jobs(labels={"run": "x"}, namespace="alice")] == created


@pytest.mark.parametrize(
    ("body", "private"),
    [
        ({"private": True}, True),  # huggingface_hub 1.x
        ({"visibility": "private"}, True),  # huggingface_hub 2.x
        ({"private": False}, False),
        ({}, False),
    ],
)
def test_bucket_visibility_from_either_client_generation(
    hub: JobsHub, hub_url: str, body: dict[str, object], private: bool
) -> None:
    _call(f"{hub_url}/api/buckets/alice/b", body)

    assert _call(f"{hub_url}/api/buckets/alice/b")[0]["private"] is private


def test_an_existing_bucket_keeps_its_visibility(api: HfApi) -> None:
    api.create_bucket("alice/b", private=False)
    api.create_bucket("alice/b", private=True, exist_ok=True)

    assert api.bucket_info("alice/b").private is False


def _read_events(url: str, *, timeout_s: float) -> tuple[list[str], bool]:
    """The SSE ``data`` lines read from ``url``, and whether the stream ended by itself."""
    lines: list[str] = []
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {TOKEN}"})
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            for raw in response:
                if raw.startswith(b"data: "):
                    lines.append(raw.decode().strip())
    except TimeoutError:
        return lines, False
    return lines, True


def test_the_log_stream_stays_open_until_the_job_ends(hub: JobsHub, hub_url: str) -> None:
    running = hub.create("alice", {**SPEC, "labels": {"name": "running"}})
    running.move_to("RUNNING")
    done = hub.create("alice", {**SPEC, "labels": {"name": "done"}})
    done.move_to("COMPLETED")

    lines, ended = _read_events(f"{hub_url}/api/jobs/alice/{done.id}/logs", timeout_s=5.0)
    assert ended and len(lines) == 2 and "Job started" in lines[0]
    lines, ended = _read_events(f"{hub_url}/api/jobs/alice/{running.id}/logs", timeout_s=0.5)
    assert not ended and len(lines) == 2


@pytest.fixture
def follower(hub: JobsHub, api: HfApi) -> Iterator[tuple[queue.Queue[str], threading.Event]]:
    """``fetch_job_logs(follow=True)`` of job ``f`` in a thread: its lines, and when it ended."""
    job = hub.create("alice", {**SPEC, "labels": {"name": "f"}})
    job.move_to("RUNNING")
    lines: queue.Queue[str] = queue.Queue()
    ended = threading.Event()

    def follow() -> None:
        for line in api.fetch_job_logs(job_id=job.id, namespace="alice", follow=True):
            lines.put(line)
        ended.set()

    thread = threading.Thread(target=follow, daemon=True)
    thread.start()
    yield lines, ended
    job.move_to("CANCELED")
    thread.join(10)


def test_following_logs_gets_new_lines_and_ends_with_the_job(
    hub: JobsHub, follower: tuple[queue.Queue[str], threading.Event]
) -> None:
    lines, ended = follower
    job = hub.named("f")
    assert lines.get(timeout=10) == "f starting"

    job.log("step 1")

    assert lines.get(timeout=10) == "step 1"
    assert not ended.is_set()
    job.move_to("COMPLETED")
    assert ended.wait(10), "the log stream did not end with the job"


def test_network_groups_are_answered_and_their_names_checked(api: HfApi, hub: JobsHub) -> None:
    job = api.run_job(image="i", command=["true"], namespace="alice", network_group="g-1",
                      network_aliases=["replica"])  # fmt: skip
    assert job.network is not None
    assert (job.network.group, job.network.aliases) == ("g-1", ["replica"])
    assert api.inspect_job(job_id=job.id, namespace="alice").network == job.network
    assert api.run_job(image="i", command=["true"], namespace="alice").network is None
    with pytest.raises(HfHubHTTPError, match="network group: lowercase"):
        api.run_job(image="i", command=["true"], namespace="alice", network_group="Bad_Group")
    with pytest.raises(HfHubHTTPError, match="aliases must be unique"):
        api.run_job(image="i", command=["true"], namespace="alice", network_group="g",
                    network_aliases=["a", "a"])  # fmt: skip


def test_an_alias_resolves_to_the_running_members_claiming_it(api: HfApi, hub: JobsHub) -> None:
    clock = FakeClock()
    hub.clock = clock.monotonic
    for name, group, alias in (("a", "g", "replica"), ("b", "g", "replica"), ("c", "g", "proxy"),
                               ("d", "other", "replica")):  # fmt: skip
        api.run_job(image="i", command=["true"], namespace="alice", labels={"name": name},
                    network_group=group, network_aliases=[alias])  # fmt: skip
        hub.place(name, f"10.0.0.{ord(name) - 96}")
    assert hub.resolve("g", "replica") == []  # still scheduling
    clock.sleep(6.0)
    assert hub.resolve("g", "replica") == ["10.0.0.1", "10.0.0.2"]
    assert hub.resolve("g", "proxy") == ["10.0.0.3"]
    hub.named("b").move_to("ERROR")
    assert hub.resolve("g", "replica") == ["10.0.0.1"]
