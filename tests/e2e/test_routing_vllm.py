"""Prefix routing measured by real vLLM's own counters: a shared-prefix workload through the
proxy reaches the hit ratio of one cache that saw every request (the one-cache optimum).

Each group's 8 prompts share a long prefix and end in their own suffix (tool outputs, few-shot
variants, a prefix-repetition benchmark), sent one after another, as the issue that found keys
moving with the traffic did. The fleet's ratio is ``vllm:prefix_cache_hits_total /
vllm:prefix_cache_queries_total`` summed over both servers, caches reset first; the optimum
replays the same prompts through the simulated replica's cache model (whole 32-token blocks,
the last prompt token always recomputed: what the contract suite checks against real vLLM).
"""

from __future__ import annotations

import json
import random
import time
import urllib.request
from pathlib import Path

from replica_entry.sim.prefix_cache import PrefixCache
from tests.e2e.support import (
    REPLICA_TOKEN,
    VllmServer,
    all_routable,
    get_text,
    metric_sum,
    post_json,
)
from trainer_entry import sidecar

BLOCK = 32  # the CPU build's KV block (tests/e2e/support.py starts vLLM with it)
PROXY_ARGS = ("--block-tokens", "32", "--template-threshold", "8", "--load-interval", "0.2")


def _counters(fleet: list[VllmServer]) -> tuple[float, float]:
    pages = [get_text(server.url + "/metrics") for server in fleet]
    hits = sum(metric_sum(page, "vllm:prefix_cache_hits_total") for page in pages)
    queries = sum(metric_sum(page, "vllm:prefix_cache_queries_total") for page in pages)
    return hits, queries


def _idle(fleet: list[VllmServer], timeout_s: float = 120.0) -> None:
    """Until no replica runs or queues a request: a request an earlier test left running (a
    client gone mid-stream: vLLM decodes on to max_tokens) makes its replica look loaded, and the
    proxy rightly spills every group to the other one, which is not what this test measures."""
    deadline = time.monotonic() + timeout_s
    while True:
        pages = [get_text(server.url + "/metrics") for server in fleet]
        busy = sum(
            metric_sum(page, name)
            for page in pages
            for name in ("vllm:num_requests_running", "vllm:num_requests_waiting")
        )
        if busy == 0:
            return
        assert time.monotonic() < deadline, f"replicas still busy after {timeout_s} s ({busy})"
        time.sleep(0.2)


def _complete(url: str, model: str, prompt: list[int]) -> str:
    body = {"model": model, "prompt": prompt, "max_tokens": 1, "temperature": 0.0}
    request = urllib.request.Request(
        url + "/v1/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=60) as response:
        assert response.status == 200
        return str(response.headers["X-Rollout-Replica"])


def test_shared_prefix_groups_reach_the_one_cache_optimum(
    clean_fleet: list[VllmServer], tmp_path: Path
) -> None:
    rng = random.Random(16)
    groups = [
        [prefix + [rng.randrange(10, 900) for _ in range(40)] for _ in range(8)]
        for prefix in ([rng.randrange(10, 900) for _ in range(8 * BLOCK)] for _ in range(12))
    ]
    model = json.loads(get_text(clean_fleet[0].url + "/v1/models"))["data"][0]["id"]
    _idle(clean_fleet)
    for server in clean_fleet:
        assert post_json(server.url + "/reset_prefix_cache", {}) == 200
    hits_before, queries_before = _counters(clean_fleet)
    adapters = tmp_path / "adapters"
    adapters.mkdir()
    argv = sidecar.sidecar_command(
        [s.url for s in clean_fleet], sidecar.free_port(), adapters, PROXY_ARGS
    )
    homes = []
    with sidecar.running(argv, env={"PROXY_UPSTREAM_TOKEN": REPLICA_TOKEN}) as url:
        all_routable(url, len(clean_fleet))
        for group in groups:
            homes.append({_complete(url, model, prompt) for prompt in group})
    hits, queries = _counters(clean_fleet)
    ratio = (hits - hits_before) / (queries - queries_before)

    optimum_cache = PrefixCache(BLOCK, 1_000_000)
    optimum = sum(optimum_cache.query(None, p) for g in groups for p in g) / sum(
        len(p) for g in groups for p in g
    )
    assert all(len(replicas) == 1 for replicas in homes), homes  # every group on one replica
    assert len(set().union(*homes)) == 2  # and the groups spread over both
    assert ratio >= 0.97 * optimum, (ratio, optimum)
