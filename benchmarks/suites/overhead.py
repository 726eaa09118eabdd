"""Suite ``overhead``: what the proxy costs over the transport floor, per request.

Three targets, the same load, alternated (A B C A B C) so machine drift cancels out:
- ``direct``: the load generator talks to a fast replica itself;
- ``passthrough``: through a bare aiohttp + uvloop pass-through (the transport floor), taking
  the same three replicas in turn;
- ``proxy``: through rollout-proxy in front of those three replicas.
For each: requests/s, latency p50/p99, and each process's CPU microseconds per request, read
from its own CPU time (``/proc/PID/stat``), so a busy machine does not distort the figure.
The replicas are ``benchmarks.harness.fast_replica`` (a raw asyncio protocol), cheaper than the
proxy, unless ``replicas`` names real ones (``--replicas``): then the same three targets stand in
front of those, the prompts use their model and stay inside its context, and the direct target's
CPU is not measured (it is not our process).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import aiohttp
import orjson

from benchmarks import report
from benchmarks.harness.blast import MODEL, VOCAB
from benchmarks.harness.cpu import cpu_seconds
from benchmarks.harness.procs import children, start_child, start_proxy
from benchmarks.micro.splice import splice_us
from replica_entry.sim.loopback import free_port

TARGETS = ("direct", "passthrough", "proxy")


@dataclass(frozen=True)
class Case:
    concurrency: int
    delay_s: float
    tokens: int
    model: str = MODEL
    vocab: int = VOCAB
    stream: bool = False  # streamed completions (server-sent events), ``max_tokens`` chunks
    max_tokens: int = 16


async def blast(
    url: str, case: Case, requests: int, procs: int, seed: int, timeout_s: float | None = None
) -> dict[str, Any]:
    """Run ``procs`` load-generator processes against ``url``; merge their results. Past
    ``timeout_s`` the generators are killed and TimeoutError raised."""
    per = max(case.concurrency // procs, 1)
    commands = [
        [
            sys.executable,
            "-m",
            "benchmarks.harness.blast",
            "--url",
            url,
            "--concurrency",
            str(per),
            "--requests",
            str(requests // procs),
            "--tokens",
            str(case.tokens),
            "--seed",
            str(seed + i),
            "--served-model-name",
            case.model,
            "--vocab",
            str(case.vocab),
            "--max-tokens",
            str(case.max_tokens),
            *(["--stream"] if case.stream else []),
        ]
        for i in range(procs)
    ]
    runs = await asyncio.wait_for(asyncio.gather(*map(run_generator, commands)), timeout_s)
    latencies = sorted(x for r in runs for x in r["latencies"])
    if not latencies:
        raise RuntimeError(
            f"{requests} requests are too few for {case.concurrency} workers: each worker's "
            "first request is left out of the latencies; send at least twice as many"
        )
    count = sum(r["count"] for r in runs)
    return {
        "count": count,
        "errors": sum(r["errors"] for r in runs),
        "wall_s": max(r["wall_s"] for r in runs),
        "p50_ms": 1000 * latencies[len(latencies) // 2],
        "p99_ms": 1000 * latencies[min(int(len(latencies) * 0.99), len(latencies) - 1)],
        "loadgen_cpu_us": 1e6 * sum(r["cpu_s"] for r in runs) / max(count, 1),
        "bytes": sum(r["bytes"] for r in runs),
    }


async def run_generator(command: list[str]) -> dict[str, Any]:
    """One load generator to its end; killed (by its PID) when the caller gives up on it."""
    process = await asyncio.create_subprocess_exec(*command, stdout=asyncio.subprocess.PIPE)
    try:
        out, _ = await process.communicate()
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    if process.returncode != 0:
        raise RuntimeError(f"load generator failed: {' '.join(command)}")
    result: dict[str, Any] = orjson.loads(out.splitlines()[-1])
    return result


async def run_case(
    case: Case,
    requests: int,
    repeats: int,
    procs: int,
    progress: Any,
    replica_urls: Sequence[str] = (),
) -> dict[str, Any]:
    async with children() as stack:
        replicas = []
        for i in range(0 if replica_urls else 3):
            port = free_port()
            args = ["--port", str(port), "--delay-s", str(case.delay_s)]
            replicas.append(
                await start_child(f"replica {i}", "benchmarks.harness.fast_replica", args, port)
            )
            stack.append(replicas[-1])
        urls = list(replica_urls) or [r.url for r in replicas]
        port = free_port()
        passthrough = await start_child(
            "passthrough",
            "benchmarks.harness.passthrough",
            ["--port", str(port), "--upstream", ",".join(urls)],
            port,
        )
        stack.append(passthrough)
        proxy = await start_proxy(
            urls, "--max-inflight-per-replica", str(max(case.concurrency, 128))
        )
        stack.append(proxy)
        await asyncio.sleep(0.5)  # first health round
        targets: dict[str, tuple[str, int | None]] = {
            "direct": (urls[0], replicas[0].process.pid if replicas else None),
            "passthrough": (passthrough.url, passthrough.process.pid),
            "proxy": (proxy.url, proxy.process.pid),
        }
        warm_case = replace(case, concurrency=min(case.concurrency, 64))
        for name, (url, _) in targets.items():  # warm-up: connections, caches, templates
            warm = await blast(url, warm_case, min(400, requests), 1, 99)
            if warm["errors"]:
                raise RuntimeError(f"{name} answered {warm['errors']} errors during warm-up")
        samples: dict[str, list[dict[str, Any]]] = {name: [] for name in TARGETS}
        for repeat in range(repeats):
            for name in TARGETS:
                url, watched = targets[name]
                before = cpu_seconds(watched) if watched else 0.0
                result = await blast(url, case, requests, procs, seed=repeat)
                if watched:
                    spent = cpu_seconds(watched) - before
                    result["server_cpu_us"] = 1e6 * spent / result["count"]
                samples[name].append(result)
                progress(f"{name} {result['count'] / result['wall_s']:.0f} req/s")
    return summarize(case, samples)


async def describe(url: str) -> tuple[str, int]:
    """A real replica's model name and context length, from its ``/v1/models``."""
    async with aiohttp.ClientSession() as session, session.get(url + "/v1/models") as resp:
        if resp.status != 200:
            raise RuntimeError(f"{url}/v1/models answered HTTP {resp.status}")
        card = (await resp.json())["data"][0]
    return str(card["id"]), int(card.get("max_model_len") or 4096)


def summarize(case: Case, samples: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    def median(name: str, key: str) -> float | None:
        values = [s[key] for s in samples[name] if key in s]
        return float(statistics.median(values)) if values else None

    row: dict[str, Any] = {
        "concurrency": case.concurrency,
        "delay_ms": case.delay_s * 1000,
        "tokens": case.tokens,
        "targets": {},
    }
    for name in TARGETS:
        row["targets"][name] = {
            "rps": statistics.median(s["count"] / s["wall_s"] for s in samples[name]),
            "p50_ms": median(name, "p50_ms"),
            "p99_ms": median(name, "p99_ms"),
            "cpu_us": median(name, "server_cpu_us"),
            "loadgen_cpu_us": median(name, "loadgen_cpu_us"),
            "errors": sum(s["errors"] for s in samples[name]),
            "runs": samples[name],
        }
    proxy, floor, direct = (row["targets"][n] for n in ("proxy", "passthrough", "direct"))
    row["model"] = case.model
    row["proxy_cpu_ratio"] = proxy["cpu_us"] / floor["cpu_us"]
    row["added_p50_ms"] = proxy["p50_ms"] - direct["p50_ms"]
    row["added_p99_ms"] = proxy["p99_ms"] - direct["p99_ms"]
    row["proxy_ceiling_rps"] = 1e6 / proxy["cpu_us"]
    return row


def suite(args: argparse.Namespace) -> tuple[list[dict[str, Any]], str]:
    """``python -m benchmarks overhead``: the grid (``--quick``: 3 cells), its table and chart."""
    model, vocab, context = MODEL, VOCAB, None
    if args.replicas:
        # Real replicas answer at their own speed (no delay knob), in their model's context.
        model, context = asyncio.run(describe(args.replicas[0]))
        vocab = 1000
        report.progress(f"real replicas serving {model} (context {context} tokens)")
    if args.quick:
        grid = [(64, 0.0, 600), (64, 0.0, 3000), (64, 0.02, 600)]
        requests, repeats = 3000, 2
    else:
        grid = [(c, d, t) for c in (64, 256, 1024) for d in (0.0, 0.02) for t in (600, 3000)]
        requests, repeats = 6000, 3
    if context is not None:
        fit = [(c, 0.0, min(t, context - 32)) for c, _, t in grid]
        grid = list(dict.fromkeys(fit))
    requests = args.requests or requests
    rows = []
    for i, (concurrency, delay, tokens) in enumerate(grid, 1):
        report.progress(
            f"case {i}/{len(grid)}: concurrency {concurrency}, delay {delay * 1000:.0f} ms, "
            f"{tokens} tokens"
        )
        case = Case(concurrency, delay, tokens, model, vocab)
        run = run_case(case, requests, repeats, 2, report.progress, args.replicas)
        rows.append(asyncio.run(run))
    text = table(rows)
    # A run's request (``/runs/<run>/``) pays one more step than the bare path: the splice.
    spliced = {tokens: splice_us(tokens) for tokens in sorted({r["tokens"] for r in rows})}
    for row in rows:
        row["run_splice_us"] = round(spliced[row["tokens"]], 2)
    each = "; ".join(f"{tokens} tokens: {us:.1f} µs" for tokens, us in spliced.items())
    text += f"\na run's request (/runs/<run>/) adds the model splice, in process: {each}"
    if args.plot:
        report.bar_chart(
            args.plot / "overhead_cpu.png",
            "CPU per request (µs)",
            [cell_label(r) for r in rows],
            {
                "passthrough": [r["targets"]["passthrough"]["cpu_us"] for r in rows],
                "proxy": [r["targets"]["proxy"]["cpu_us"] for r in rows],
            },
            "µs",
        )
    return rows, text


# The table's columns, each with what it means (printed under the table as its legend).
COLUMNS = {
    "conns": "concurrent connections of the load generator",
    "delay_ms": "the replica's delay before it answers",
    "tokens": "prompt tokens per request",
    "direct_rps": "requests/s straight to a replica",
    "passthru_rps": "requests/s through the bare aiohttp pass-through (the transport floor)",
    "proxy_rps": "requests/s through rollout-proxy",
    "passthru_cpu_us": "the pass-through's CPU time per request, µs",
    "proxy_cpu_us": "the proxy's CPU time per request, µs",
    "cpu_ratio": "proxy_cpu_us / passthru_cpu_us",
    "+p50_ms": "latency the proxy adds over direct, p50",
    "+p99_ms": "and p99",
    "ceiling_rps": "requests/s one proxy core could carry at that CPU cost (1e6 / proxy_cpu_us)",
}


def cell_label(row: dict[str, Any]) -> str:
    """A grid cell as a chart's axis names it, in words."""
    return f"{row['concurrency']} conns, {row['delay_ms']:.0f} ms delay, {row['tokens']} tokens"


def table(rows: list[dict[str, Any]]) -> str:
    """The grid's table, then a legend line per column."""
    lines = []
    for row in rows:
        t = row["targets"]
        lines.append(
            [
                row["concurrency"],
                row["delay_ms"],
                row["tokens"],
                t["direct"]["rps"],
                t["passthrough"]["rps"],
                t["proxy"]["rps"],
                t["passthrough"]["cpu_us"],
                t["proxy"]["cpu_us"],
                row["proxy_cpu_ratio"],
                row["added_p50_ms"],
                row["added_p99_ms"],
                row["proxy_ceiling_rps"],
            ]
        )
    legend = "\n".join(f"  {name}: {meaning}" for name, meaning in COLUMNS.items())
    return report.table(list(COLUMNS), lines) + "\n" + legend
