"""``python -m benchmarks SUITE [--json OUT] [--plot DIR] [--quick]`` (also ``make bench``).

Suites: ``overhead`` (CPU and latency over the transport floor), ``routing`` (cache hit rate and
balance per policy), ``fleet`` (step time of async GRPO on a simulated fleet, per policy; its
own flags: ``python -m benchmarks fleet --help``), ``sync`` (adapter fleet-sync latency under
mount lag), ``policy`` (the routing policy alone), ``soak`` (RSS, open files and tasks under
load over time), ``scale`` (throughput and memory against fleet size and tracked prompts),
``profile`` (where the proxy's CPU goes, by module, under cProfile). Everything runs on loopback
against simulated replicas; ``--replicas URL[,URL...]`` points ``overhead`` and ``soak`` at real
ones.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks import report
from benchmarks.harness.blast import MODEL, VOCAB


def progress(message: str) -> None:
    sys.stderr.write(f"  .. {message}\n")
    sys.stderr.flush()


def suite_overhead(args: argparse.Namespace) -> tuple[list[dict[str, Any]], str]:
    from benchmarks.suites.overhead import Case, describe, run_case

    model, vocab, context = MODEL, VOCAB, None
    if args.replicas:
        # Real replicas answer at their own speed (no delay knob), in their model's context.
        model, context = asyncio.run(describe(args.replicas[0]))
        vocab = 1000
        progress(f"real replicas serving {model} (context {context} tokens)")
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
        progress(
            f"case {i}/{len(grid)}: concurrency {concurrency}, delay {delay * 1000:.0f} ms, "
            f"{tokens} tokens"
        )
        case = Case(concurrency, delay, tokens, model, vocab)
        run = run_case(case, requests, repeats, 2, progress, args.replicas)
        rows.append(asyncio.run(run))
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
    text = report.table(
        [
            "conc",
            "delay_ms",
            "tokens",
            "direct_rps",
            "pass_rps",
            "proxy_rps",
            "pass_us",
            "proxy_us",
            "ratio",
            "+p50_ms",
            "+p99_ms",
            "ceiling_rps",
        ],
        lines,
    )
    if args.plot:
        labels = [f"c{r['concurrency']}/d{r['delay_ms']:.0f}/t{r['tokens']}" for r in rows]
        report.bar_chart(
            args.plot / "overhead_cpu.png",
            "CPU per request (µs)",
            labels,
            {
                "passthrough": [r["targets"]["passthrough"]["cpu_us"] for r in rows],
                "proxy": [r["targets"]["proxy"]["cpu_us"] for r in rows],
            },
            "µs",
        )
    return rows, text


def suite_routing(args: argparse.Namespace) -> tuple[list[dict[str, Any]], str]:
    from benchmarks.suites.routing import run

    sizes = (2, 3, 8) if args.quick else (2, 3, 8, 16)
    rows = run(sizes, 20 if args.quick else 60, progress)
    text = report.table(
        ["workload", "replicas", "membership", "policy", "hit_rate", "best", "of_best",
         "max/mean", "spill"],
        [[r["workload"], r["replicas"], r["membership"], r["policy"], r["hit_rate"],
          r["best_rate"], r["of_best"], r["max_mean"], r["spill_rate"]] for r in rows],
    )  # fmt: skip
    if args.plot:
        cases = list(dict.fromkeys((r["workload"], r["replicas"], r["membership"]) for r in rows))
        labels = [f"{w} {n} {m}" for w, n, m in cases]
        series = {
            p: [
                next(
                    r["hit_rate"]
                    for r in rows
                    if (r["workload"], r["replicas"], r["membership"]) == c and r["policy"] == p
                )
                for c in cases
            ]
            for p in dict.fromkeys(r["policy"] for r in rows)
        }
        report.bar_chart(
            args.plot / "routing_hit_rate.png",
            "Prefix-cache hit rate (tokens)",
            labels,
            series,
            "hit rate",
        )
    return rows, text


def suite_sync(args: argparse.Namespace) -> tuple[list[dict[str, Any]], str]:
    if args.push:
        from benchmarks.suites.sync import suite_push

        return suite_push(args.quick, progress)
    from benchmarks.sync.mount import run_point

    lags = (0.0, 2.5) if args.quick else (0.0, 1.0, 2.5, 10.0)
    sizes = (3,) if args.quick else (2, 3, 8, 16)
    repeats = 3 if args.quick else 5
    rows = []
    for lag in lags:
        for replicas in sizes:
            progress(f"mount lag {lag} s, {replicas} replicas")
            rows.append(asyncio.run(run_point(lag, replicas, repeats, seed=replicas)))
    text = report.table(
        ["lag_s", "replicas", "slowest_lag_s", "p50_over_lag_s", "max_over_lag_s"],
        [
            [
                r["lag_s"],
                r["replicas"],
                r["slowest_lag_s"],
                r["p50_over_lag_s"],
                r["max_over_lag_s"],
            ]
            for r in rows
        ],
    )
    return rows, text


def suite_policy(args: argparse.Namespace) -> tuple[list[dict[str, Any]], str]:
    from benchmarks.micro import worst_case
    from benchmarks.micro.policy import measure, state_memory

    rows: list[dict[str, Any]] = [
        measure(t, 8, 5000 if args.quick else 20000) for t in (1000, 4000)
    ]
    memory = state_memory(100_000 if args.quick else 1_000_000)
    text = report.table(
        ["tokens", "us/decision", "peek_us", "keys_us", "select_us", "decisions/s"],
        [
            [
                r["tokens"],
                r["us_per_decision"],
                r["us_peek"],
                r["us_keys"],
                r["us_select"],
                r["decisions_per_s"],
            ]
            for r in rows
        ],
    )
    text += (
        f"\nstate after {memory['prompts']} distinct prompts: {memory['bytes'] / 1e6:.1f} MB"
        f" ({memory['tracked_prefixes']} tracked prefixes, {memory['sticky_keys']} sticky)"
    )
    worst = worst_case.run()
    text += "\n\nworst-case request shapes (body reader + keys, best of 3):\n" + report.table(
        ["shape", "MiB", "ms", "outcome"],
        [[w["shape"], w["bytes"] / worst_case.MIB, w["ms"], w["outcome"]] for w in worst],
    )
    return [*rows, {"memory": memory}, *({"worst_case": w} for w in worst)], text


def suite_soak(args: argparse.Namespace) -> tuple[list[dict[str, Any]], str]:
    from benchmarks.suites.soak import soak

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


def suite_scale(args: argparse.Namespace) -> tuple[list[dict[str, Any]], str]:
    from benchmarks.suites.scale import run

    sizes = (2, 8, 32) if args.quick else (2, 4, 8, 16, 32, 64)
    prompts = (1_000, 100_000) if args.quick else (1_000, 10_000, 100_000, 1_000_000)
    result = run(sizes, prompts, 3000 if args.quick else 6000, progress)
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


def suite_profile(args: argparse.Namespace) -> tuple[list[dict[str, Any]], str]:
    from benchmarks.suites.cpu_profile import run

    result = asyncio.run(run(6000 if args.quick else 20000, progress))
    text = report.table(
        ["area", "share", "us_per_req_profiled"],
        [[a["area"], a["share"], a["us_per_request"]] for a in result["areas"]],
    )
    text += (
        f"\nproxy's own modules: {100 * result['proxy_code_share']:.1f} % of its CPU; "
        f"{result['profiled_us_per_request']:.0f} µs per request under the profiler"
    )
    return [result], text


SUITES = {
    "overhead": suite_overhead,
    "routing": suite_routing,
    "sync": suite_sync,
    "policy": suite_policy,
    "soak": suite_soak,
    "scale": suite_scale,
    "profile": suite_profile,
}


def _urls(text: str) -> list[str]:
    urls = [u.strip().rstrip("/") for u in text.split(",") if u.strip()]
    for url in urls:
        if not url.startswith(("http://", "https://")):
            raise argparse.ArgumentTypeError(f"not an http(s) URL: {url!r}")
    return urls


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["fleet"]:  # many model flags of its own
        from benchmarks.fleet.cli import main as fleet_main

        return fleet_main(argv[1:])
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    parser.add_argument("suite", choices=[*sorted(SUITES), "fleet"])
    parser.add_argument("--json", type=Path, help="write results (with the environment) here")
    parser.add_argument("--plot", type=Path, help="write PNG charts into this directory")
    parser.add_argument("--quick", action="store_true", help="a smaller grid (minutes)")
    parser.add_argument("--seconds", type=float, help="soak: how long to run (default 300)")
    parser.add_argument(
        "--replicas",
        type=_urls,
        default=[],
        help="overhead, soak: real replicas (URL[,URL...]) instead of local simulated ones",
    )
    parser.add_argument(
        "--requests", type=int, help="overhead: requests per target and repeat (default 6,000)"
    )
    parser.add_argument(
        "--push",
        action="store_true",
        help="sync: adapter push against the mount path (sizes, fleet sizes, link limits)",
    )
    args = parser.parse_args(argv)
    started = time.monotonic()
    print(f"benchmarks: suite {args.suite}{' (quick)' if args.quick else ''}")
    results, text = SUITES[args.suite](args)
    print(text)
    print(f"({time.monotonic() - started:.0f} s)")
    if args.json:
        env = report.environment({"suite": args.suite, "quick": args.quick})
        report.write_json(args.json, args.suite, env, results)
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
