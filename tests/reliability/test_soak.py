"""A bounded soak: moderate load for a few seconds; memory, files, tasks and state stay flat.
(The long form: ``python -m benchmarks soak --seconds 600``.)"""

from __future__ import annotations

from benchmarks.suites.soak import soak


async def test_soak_leaves_nothing_behind() -> None:
    result = await soak(12.0, interval_s=1.0)
    assert result.errors == 0
    assert result.requests > 1000
    samples = result.samples
    warm, last = samples[2], samples[-1]
    assert last["rss_mb"] - warm["rss_mb"] < 10
    assert last["inflight"] == 0
    # Back to the background loops once the load stops: the proxy's (8), the adapter state
    # file's writer and one adapter agent per replica (2). The fewest at rest: a sample can
    # land while a probe or a load scrape (a task each, per replica) is under way, which on a
    # busy machine lasts long enough to be seen twice in a row; a leak raises every sample.
    assert min(sample["tasks"] for sample in result.at_rest) <= 8 + 1 + 2, result.at_rest
    # Idle keep-alive connections to the replicas (up to each one's peak in flight, which the
    # prefix policy lets reach a group's slack above the bound: 32 in flight over 2 replicas
    # peak at ~28 each), nothing leaking: a leak over ~1,000 requests would be hundreds.
    assert last["fds"] <= samples[0]["fds"] + 32
    assert all(s.get("routing_sticky_keys", 0) <= 4096 for s in samples)
    assert all(s.get("routing_tracked_prefixes", 0) <= 4096 for s in samples)
