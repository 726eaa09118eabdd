"""Discovery in an organisation's namespace (issue 27, finding 14): any member may start a job
carrying the run's label there; the proxy sends its upstream token only to the jobs its own
user started (``JobInfo.initiator``). The real huggingface_hub client against the Jobs
stand-in, real replicas on loopback, bounded polls."""

from __future__ import annotations

import pytest

from proxy.app import PROXY, build_app
from proxy.app import serve as serve_proxy
from proxy.fleet.discovery import JobsLookup
from replica_entry.sim import SIM_STATE
from tests.integration.test_discovery import TOKEN, jobs_discovery, replica_spec
from tests.support.fleet import run_sim
from tests.support.hub_jobs import JobsHub, Step, build_jobs_hub_app
from tests.support.servers import serve
from tests.support.waiting import wait_for


async def test_in_an_org_namespace_only_the_tokens_own_users_jobs_are_the_runs(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Any member of an organisation may start a job carrying the run's label there; the proxy
    sends its token only to the jobs its own user started (``JobInfo.initiator``)."""
    hub = JobsHub(token=TOKEN, default_steps=(Step("RUNNING"),))
    async with (
        serve(build_jobs_hub_app(hub)) as hub_url,
        run_sim() as ours,
        run_sim() as theirs,
    ):
        mine = hub.create("team-org", replica_spec("exp1"))  # started by alice, the token's user
        hub.exposed[mine.name] = ours.url
        other = hub.create("team-org", {**replica_spec("exp1"), "labels": {
            "rollout-replicas": "exp1", "name": "intruder"}}, initiator="mallory")  # fmt: skip
        hub.exposed[other.name] = theirs.url
        app = build_app(jobs_discovery(hub_url, "team-org"))
        pool = app[PROXY].fleet.pool
        async with serve_proxy(app):
            await wait_for(lambda: [r.id for r in pool.routable()] == [ours.id], what="ours found")
            discovery = app[PROXY].fleet.discovery
            assert discovery is not None
            lookup = discovery.lookup
            assert isinstance(lookup, JobsLookup)
            await wait_for(lambda: other.id in lookup._foreign, what="the intruder skipped")
            assert [r.id for r in pool] == [ours.id]
            polls = 0
            poll = lookup._running_urls

            def counted() -> set[str]:
                nonlocal polls
                polls += 1
                return poll()

            setattr(lookup, "_running_urls", counted)  # noqa: B010 (a method, counted)
            await wait_for(lambda: polls >= 3, what="three more polls that see the intruder")
        skipped = [r for r in caplog.records if "not started by this token's user" in r.message]
        assert len(skipped) == 1  # logged once, however many polls saw it
        # The intruder never got a request, so never the token either.
        assert len(theirs.app[SIM_STATE].records) == 0
