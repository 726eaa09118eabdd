"""Suite ``scale``: proxy throughput and memory against fleet size and tracked prompts.

- Fleet size: 2 to 64 fast replicas (one cheap process listening on many ports) behind one
  proxy; the same closed-loop load; requests/s, the proxy's CPU per request and its RSS.
- Tracked prompts: the routing policy's state after 10^3 to 10^6 distinct prompts (tracemalloc),
  bounded by ``--sticky-size`` and ``--max-tracked``.
"""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

from benchmarks import report
from benchmarks.harness.cpu import cpu_seconds
from benchmarks.harness.procs import children, start_child, start_proxy, wait_routable
from benchmarks.micro.policy import state_memory
from benchmarks.suites.overhead import Case, blast
from benchmarks.suites.soak import _rss_mb
from replica_entry.sim.loopback import free_port


async def fleet_point(replicas: int, requests: int) -> dict[str, Any]:
    async with children() as stack:
        ports = [free_port() for _ in range(replicas)]
        args = ["--port", *map(str, ports)]
        stack.append(
            await start_child("replicas", "benchmarks.harness.fast_replica", args, ports[0])
        )
        proxy = await start_proxy([f"http://127.0.0.1:{p}" for p in ports])
        stack.append(proxy)
        await wait_routable(proxy.url, len(ports))
        case = Case(64, 0.0, 600)
        await blast(proxy.url, case, 400, 1, 99)
        before = cpu_seconds(proxy.process.pid)
        result = await blast(proxy.url, case, requests, 2, 0)
        cpu_us = 1e6 * (cpu_seconds(proxy.process.pid) - before) / result["count"]
        return {
            "replicas": replicas,
            "rps": result["count"] / result["wall_s"],
            "proxy_cpu_us": cpu_us,
            "proxy_rss_mb": _rss_mb(proxy.process.pid),
            "errors": result["errors"],
        }


def run(
    sizes: tuple[int, ...], prompts: tuple[int, ...], requests: int, progress: Any
) -> dict[str, Any]:
    fleet = []
    for size in sizes:
        progress(f"{size} replicas")
        fleet.append(asyncio.run(fleet_point(size, requests)))
    memory = []
    for count in prompts:
        progress(f"{count} tracked prompts")
        memory.append(state_memory(count, max_tracked=65_536))
    return {"fleet": fleet, "memory": memory}


def suite(args: argparse.Namespace) -> tuple[list[dict[str, Any]], str]:
    """``python -m benchmarks scale``: throughput against fleet size, memory against prompts."""
    sizes = (2, 8, 32) if args.quick else (2, 4, 8, 16, 32, 64)
    prompts = (1_000, 100_000) if args.quick else (1_000, 10_000, 100_000, 1_000_000)
    result = run(sizes, prompts, 3000 if args.quick else 6000, report.progress)
    text = report.table(
        ["replicas", "rps", "proxy_cpu_us", "proxy_rss_mb", "errors"],
        [
            [r["replicas"], r["rps"], r["proxy_cpu_us"], r["proxy_rss_mb"], r["errors"]]
            for r in result["fleet"]
        ],
    )
    text += "\n" + report.table(
        ["prompts", "state_mb", "sticky_keys", "tracked_prefixes"],
        [
            [m["prompts"], m["bytes"] / 1e6, m["sticky_keys"], m["tracked_prefixes"]]
            for m in result["memory"]
        ],
    )
    return [result], text
