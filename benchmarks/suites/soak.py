"""Suite ``soak``: fixed moderate load for a set time; the proxy's RSS, open files and tasks.

Two simulated replicas (or the real ones given) and the proxy run as separate processes;
GRPO-shaped traffic (new prompts all the time, so routing state keeps growing up to its bounds)
is replayed until the deadline, and the proxy is sampled every ``interval_s``: resident memory,
open file descriptors, asyncio tasks and the routing policy's tracked state.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from benchmarks import report
from benchmarks.harness.loadgen import LoadGenerator
from benchmarks.harness.procs import children, start_child, start_proxy
from benchmarks.harness.trace import TraceShape
from benchmarks.suites.overhead import describe
from replica_entry.sim.loopback import free_port

REST_S = 15.0  # the longest wait for the proxy to be at rest after the load
SIM_FLAGS = ["--gen-token-s", "0.001", "--overhead-s", "0.001", "--cache-blocks", "2048"]


@dataclass
class SoakResult:
    samples: list[dict[str, Any]] = field(default_factory=list)
    requests: int = 0
    errors: int = 0
    rested_from: int = 0  # the index of the first sample after the load stopped

    @property
    def at_rest(self) -> list[dict[str, Any]]:
        """The samples taken after the load stopped."""
        return self.samples[self.rested_from :]


def _rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as handle:
        for line in handle:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


async def soak(
    seconds: float,
    interval_s: float = 1.0,
    concurrency: int = 32,
    replica_urls: Sequence[str] = (),
) -> SoakResult:
    result = SoakResult()
    model = "sim-model"
    async with children() as stack:
        for i in range(0 if replica_urls else 2):
            port = free_port()
            args = ["--backend", "sim", "--port", str(port), "--seed", str(i), *SIM_FLAGS]
            stack.append(await start_child(f"replica {i}", "replica_entry", args, port))
        if replica_urls:
            model, _ = await describe(replica_urls[0])
        urls = list(replica_urls) or [child.url for child in stack]
        proxy = await start_proxy(urls, "--sticky-size", "4096", "--max-tracked", "4096")
        stack.append(proxy)
        await asyncio.sleep(0.5)
        deadline = time.monotonic() + seconds
        sampler = asyncio.create_task(_sample(proxy.url, proxy.process.pid, interval_s, result))
        seed = 0
        while time.monotonic() < deadline:
            # One run's template (a run has one chat template), new problems each round.
            shape = TraceShape(prompts=16, group_size=8, turns=2, seed=seed, template_seed=0)
            generator = LoadGenerator(proxy.url, shape, model=model, concurrency=concurrency)
            run = await generator.run()
            result.requests += len(run.samples)
            result.errors += len(run.errors)
            seed += 1
        await _rest(result, interval_s)
        sampler.cancel()
        await asyncio.gather(sampler, return_exceptions=True)
    return result


async def _rest(result: SoakResult, interval_s: float) -> None:
    """Until the proxy is at rest (nothing in flight, its task count the same two samples in a
    row: the load's connections closed), or ``REST_S`` passed; then the last sample is one at
    rest, however busy the machine was."""
    deadline = time.monotonic() + max(REST_S, 2 * interval_s)
    seen = result.rested_from = len(result.samples)
    while time.monotonic() < deadline:
        await asyncio.sleep(interval_s)
        before, last = result.samples[-2:] if len(result.samples) > seen + 1 else ({}, {})
        if last and before["tasks"] == last["tasks"] and last["inflight"] == 0:
            return


async def _sample(url: str, pid: int, interval_s: float, result: SoakResult) -> None:
    started = time.monotonic()
    async with aiohttp.ClientSession() as session:
        while True:
            async with session.get(url + "/proxy/status") as resp:
                status = await resp.json()
            result.samples.append(
                {
                    "t": time.monotonic() - started,
                    "rss_mb": _rss_mb(pid),
                    "fds": len(os.listdir(f"/proc/{pid}/fd")),
                    "tasks": status["tasks"],
                    "inflight": status["inflight"],
                    **{f"routing_{k}": v for k, v in status["routing"].items()},
                }
            )
            await asyncio.sleep(interval_s)


def suite(args: argparse.Namespace) -> tuple[list[dict[str, Any]], str]:
    """``python -m benchmarks soak``: ``--seconds`` of load (default 300), sampled 30 times."""
    seconds = args.seconds or (20.0 if args.quick else 300.0)
    result = asyncio.run(soak(seconds, max(seconds / 30, 1.0), replica_urls=args.replicas))
    rows = result.samples
    text = report.table(
        ["t_s", "rss_mb", "fds", "tasks", "inflight", "sticky_keys", "tracked_prefixes"],
        [
            [
                r["t"],
                r["rss_mb"],
                r["fds"],
                r["tasks"],
                r["inflight"],
                r.get("routing_sticky_keys", 0),
                r.get("routing_tracked_prefixes", 0),
            ]
            for r in rows
        ],
    )
    text += f"\n{result.requests} requests, {result.errors} errors"
    if args.plot:
        report.line_chart(
            args.plot / "soak_rss.png",
            "Proxy RSS over time",
            [r["t"] for r in rows],
            {"rss_mb": [r["rss_mb"] for r in rows]},
            "MB",
        )
    return [{"requests": result.requests, "errors": result.errors, "samples": rows}], text
