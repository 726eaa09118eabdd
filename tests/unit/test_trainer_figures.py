"""The proxy's figures the trainer adds to TRL's logs (trainer_entry.proxy_figures)."""

from __future__ import annotations

import asyncio

import pytest

from tests.support.fleet import run_stack
from trainer_entry.proxy_figures import ProxyFigures, figures, run_of


def test_figures_from_a_status_page() -> None:
    status = {
        "inflight": 3,
        "queued": 0,
        "replicas": [{"routable": True}, {"routable": False}, {"routable": True}],
        "quality": {"hit_ratio": 0.6, "available": 0.75, "efficiency": 0.8},
        "syncs": {"last_s": 1.5, "paused_share": 0.1},
        "advice": {"verdict": "generation-bound"},
        "rollouts": {"": {"stale": 6, "stale_share": 0.05}, "other": {"stale": 1}},
    }
    assert figures(status) == {
        "proxy/replicas_routable": 2.0,
        "proxy/inflight": 3.0,
        "proxy/queued": 0.0,
        "proxy/cache_hit_ratio": 0.6,
        "proxy/reuse_available": 0.75,
        "proxy/affinity_efficiency": 0.8,
        "proxy/sync_window_s": 1.5,
        "proxy/paused_share": 0.1,
        "proxy/advice": "generation-bound",
        "proxy/stale_share": 0.05,
        "proxy/stale_rollouts": 6.0,
    }


def test_figures_not_known_yet_are_left_out() -> None:
    out = figures({"replicas": [], "quality": {"hit_ratio": None}, "syncs": {"last_s": None}})
    assert "proxy/cache_hit_ratio" not in out and "proxy/sync_window_s" not in out


async def test_a_live_proxy_is_read_and_an_absent_one_costs_nothing(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async with run_stack(2) as stack:
        read = await asyncio.to_thread(ProxyFigures(stack.proxy_url).read)
        assert read["proxy/replicas_routable"] == 2.0
    gone = ProxyFigures("http://127.0.0.1:9")
    assert await asyncio.to_thread(gone.read) == {}
    assert await asyncio.to_thread(gone.read) == {}
    assert sum("proxy figures unavailable" in r.getMessage() for r in caplog.records) == 1


async def test_behind_a_relay_the_figures_are_the_remote_proxys(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """--proxy-url always runs a local relay (it pushes adapters); the figures describe the
    fleet, so they come from the remote proxy, with the token the relay sends it."""
    from trainer_entry.cli import figures_source
    from trainer_entry.flags import build_parser
    from trainer_entry.freeze import options_from_args
    from trainer_entry.proxy_figures import replicas_reported

    monkeypatch.setenv("REMOTE_TOKEN", "remote-key")
    async with run_stack(2, api_key="remote-key") as stack:
        parser = build_parser()
        argv = [
            *("--model", "m", "--dataset", "d.jsonl", "--output-dir", "/tmp/run"),
            *("--proxy-url", stack.proxy_url, "--proxy-token-env", "REMOTE_TOKEN"),
        ]
        url, token = figures_source(options_from_args(parser.parse_args(argv), parser))
        assert (url, token) == (stack.proxy_url, "remote-key")
        read = await asyncio.to_thread(ProxyFigures(stack.proxy_url, token).read)
        assert read["proxy/replicas_routable"] == 2.0
        # What sizes the trainer's in-flight default: the replicas behind the remote proxy.
        assert await asyncio.to_thread(replicas_reported, stack.proxy_url, token) == 2
        assert await asyncio.to_thread(replicas_reported, stack.proxy_url, None) is None


async def test_a_run_of_a_shared_fleet_reads_its_own_figures() -> None:
    """A trainer at ``/runs/<run>`` reads its run's rollouts, slots and verdict on the page the
    proxy serves there (the whole fleet's), not the bare path's (it read those: all zeros in a
    shared fleet, where every trainer is a run)."""
    async with run_stack(2, runs="a,b") as stack:
        async with stack.session.get(stack.proxy_url + "/runs/a/proxy/status") as response:
            page = await response.json()
        bare = await asyncio.to_thread(ProxyFigures(stack.proxy_url).read)
        scoped = await asyncio.to_thread(ProxyFigures(stack.proxy_url + "/runs/a/").read)
    assert set(page["rollouts"]) == {"", "a", "b"} and set(page["runs"]) == {"a", "b"}
    assert scoped["proxy/replicas_routable"] == bare["proxy/replicas_routable"] == 2.0
    # The page's own shape, with the run's figures set apart from the bare path's.
    assert {"stale", "stale_share"} <= set(page["rollouts"]["a"])
    assert {"inflight", "queued", "advice"} <= set(page["runs"]["a"])
    page["rollouts"]["a"].update(stale=7, stale_share=0.25)
    page["runs"]["a"].update(inflight=5, queued=2, advice={"verdict": "generation-bound"})
    mine = figures(page, "a")
    assert (mine["proxy/stale_rollouts"], mine["proxy/stale_share"]) == (7.0, 0.25)
    assert (mine["proxy/inflight"], mine["proxy/queued"]) == (5.0, 2.0)
    assert mine["proxy/advice"] == "generation-bound"
    assert figures(page)["proxy/stale_rollouts"] == page["rollouts"][""]["stale"]
    assert run_of("http://proxy:8000/runs/lr-3e5") == "lr-3e5"
    assert run_of("http://proxy:8000") == run_of("http://proxy:8000/v1") == ""
