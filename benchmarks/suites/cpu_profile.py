"""Where the proxy's CPU goes: the proxy under cProfile, loaded like the overhead suite's c64 case.

``python -m benchmarks profile`` starts three fast replicas and a proxy child that runs under
cProfile (``python -m benchmarks.suites.cpu_profile --out FILE PROXY-ARGS``), sends GRPO-shaped
load, stops the proxy with SIGTERM (it writes the profile as it exits) and sums its functions'
own time by module: the proxy's modules one by one, aiohttp's server, the event loop, socket
calls.
cProfile slows Python code more than C code, so the shares are the figure to read, not the
absolute times (the overhead suite measures those, unprofiled).
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import pstats
import re
import sys
import tempfile
from pathlib import Path
from typing import Any

import proxy
from benchmarks import report
from benchmarks.harness.procs import children, start_child, stop_child
from benchmarks.suites.overhead import Case, blast
from proxy.config.programs import OneLineParser
from replica_entry.sim.loopback import free_port

_SITE = re.compile(r"site-packages/(.+)\.py$")
_STDLIB = re.compile(r"lib/python3\.\d+/(.+)\.py$")
_ROOT = Path(proxy.__file__).resolve().parent.parent.as_posix() + "/"  # where proxy/ lives


def area(filename: str, function: str) -> str:
    """The module a profiled function belongs to, dotted (``proxy.dataplane.forward``,
    ``aiohttp.web_protocol``), or for a C function its name."""
    if filename == "~":
        text = re.sub(r"[<>{}]|built-in method |method |of |objects|'", "", function)
        return " ".join(text.split())
    path = filename.replace("\\", "/")
    match = _SITE.search(path) or _STDLIB.search(path)
    if match:
        return match[1].replace("/", ".")
    return path[len(_ROOT) : -3].replace("/", ".") if path.startswith(_ROOT) else path


def summarize(stats_path: Path, requests: int, top: int = 18) -> dict[str, Any]:
    """Own time by area, over the functions that run per request.

    uvloop's C code (polling, socket reads, timers) has no Python frame: the profiler charges it,
    idle waits included, to the Python frame that runs the loop, a start-up or lifecycle
    function called a handful of times. Functions called fewer than once per hundred requests are
    therefore kept apart (``other_s``) rather than mixed into the per-request shares.
    """
    stats = pstats.Stats(str(stats_path))
    by_area: dict[str, float] = {}
    other = 0.0
    raw: dict[Any, Any] = stats.stats  # type: ignore[attr-defined]
    for (filename, _line, function), (_cc, calls, own, _cum, _callers) in raw.items():
        if calls < requests / 100:
            other += own
            continue
        key = area(filename, function)
        by_area[key] = by_area.get(key, 0.0) + own
    total = sum(by_area.values())
    ranked = sorted(by_area.items(), key=lambda item: item[1], reverse=True)
    proxy_own = sum(t for k, t in by_area.items() if k.startswith("proxy."))
    return {
        "requests": requests,
        "profiled_us_per_request": 1e6 * total / max(requests, 1),
        "proxy_code_share": proxy_own / total if total else 0.0,
        "other_s": other,
        "areas": [
            {"area": k, "share": t / total, "us_per_request": 1e6 * t / max(requests, 1)}
            for k, t in ranked[:top]
        ],
    }


async def run(requests: int, progress: Any) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "proxy.prof"
        async with children() as stack:
            replicas = []
            for i in range(3):
                port = free_port()
                replicas.append(
                    await start_child(
                        f"replica {i}",
                        "benchmarks.harness.fast_replica",
                        ["--port", str(port)],
                        port,
                    )
                )
                stack.append(replicas[-1])
            port = free_port()
            proxy_args = [
                *("--port", str(port), "--replica-urls", ",".join(r.url for r in replicas)),
                *("--log-level", "warning", "--max-inflight-per-replica", "128"),
            ]
            proxy = await start_child(
                "profiled proxy",
                "benchmarks.suites.cpu_profile",
                ["--out", str(out), *proxy_args],
                port,
            )
            stack.append(proxy)
            await asyncio.sleep(0.5)
            progress(f"profiling the proxy over {requests} requests (c64, 600 tokens)")
            result = await blast(proxy.url, Case(64, 0.0, 600), requests, 2, seed=0)
            if result["errors"]:
                raise RuntimeError(f"the proxy answered {result['errors']} errors under load")
            await stop_child(proxy, grace_s=30)
        if not out.exists():
            raise RuntimeError("the profiled proxy wrote no profile (did it exit cleanly?)")
        return summarize(out, result["count"])


def suite(args: argparse.Namespace) -> tuple[list[dict[str, Any]], str]:
    """``python -m benchmarks profile``: the proxy's CPU by area under cProfile."""
    result = asyncio.run(run(6000 if args.quick else 20000, report.progress))
    text = report.table(
        ["area", "share", "us_per_req_profiled"],
        [[a["area"], a["share"], a["us_per_request"]] for a in result["areas"]],
    )
    text += (
        f"\nproxy's own modules: {100 * result['proxy_code_share']:.1f} % of its CPU; "
        f"{result['profiled_us_per_request']:.0f} µs per request under the profiler"
    )
    return [result], text


def main(argv: list[str] | None = None) -> int:
    """Child entry: run ``python -m proxy ARGS`` under cProfile; write the profile on exit."""
    parser = OneLineParser(prog="python -m benchmarks.suites.cpu_profile")
    parser.add_argument("--out", type=Path, required=True)
    args, proxy_args = parser.parse_known_args(argv)
    from proxy.cli import main as proxy_main

    profiler = cProfile.Profile()
    profiler.enable()
    try:
        code = proxy_main(proxy_args)
    finally:
        profiler.disable()
        profiler.dump_stats(args.out)
    return code


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
