"""Suite ``burst``: a first wave, thousands of new connections at once, on a busy machine.

An RL fleet's first wave is a burst: a rollout worker opens its whole in-flight count at once,
each on a new connection, and the proxy must open as many upstream. The scenario of issue 48:
``REPLICAS`` simulated replicas (``rollout-replica --backend sim``, 20 tokens at 0.5 s each, the
sim's listen backlog), the proxy with ``--max-inflight-per-replica 256 --max-client-connections
8192`` and its defaults otherwise (``--connect-timeout`` 5 s), ``REQUESTS`` streamed completions
sent at once from two client processes, then as many non-streamed; ``--hogs`` busy loops (2)
beside it all. ``--kill-one``: one replica SIGKILLed ``KILL_AFTER_S`` into the streamed wave: it
must still be ejected, and its streams continue elsewhere (migrations).

Each wave runs twice: first straight to the replicas (the clients spread it round robin: the
baseline, on the same busy machine), then through the proxy. Per wave: how many completed, the
answers by status, the latency's p50/p99 (the replica's own time is ``TOKENS`` x
``GEN_TOKEN_S``, 10 s; the rest is the machine's), what the proxy added to the baseline's p50
and p99, ejections by cause and stream migrations by outcome (the proxy's counters, read after
each wave), the proxy's CPU seconds and its peak RSS. A wave where any request did not complete
is a failed row. With ``--kill-one`` the non-streamed waves (both) run on one replica fewer.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import resource
import sys
from collections.abc import Iterator
from typing import Any

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from benchmarks import report
from benchmarks.harness.cpu import cpu_seconds
from benchmarks.harness.hogs import hogs
from benchmarks.harness.procs import Child, children, start_child, start_proxy, wait_routable
from benchmarks.suites.overhead import run_generator
from benchmarks.suites.soak import _rss_mb
from replica_entry.sim.loopback import free_port

REPLICAS = 32
REQUESTS = 5_000  # per wave
QUICK = (8, 1_000)  # replicas, requests per wave with --quick
CLIENTS = 2  # client processes, each sending its share at once
TOKENS = 20
GEN_TOKEN_S = 0.5
PROMPT_TOKENS = 32
VOCAB = 1_000  # the simulated replica's default
MODEL = "burst-model"
LIMIT_FLAGS = ("--max-inflight-per-replica", "256", "--max-client-connections", "8192")
KILL_AFTER_S = 3.0
WAVE_TIMEOUT_S = 300.0  # one wave's answers, however busy the machine
SAMPLE_S = 0.5  # the proxy's RSS, sampled this often for its peak
FILES_NEEDED = 4 * REQUESTS  # descriptors: the clients', the proxy's both sides, the replicas'


def _raise_file_limit() -> None:
    """Children inherit the limit: thousands of connections each need a descriptor."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < FILES_NEEDED and (hard == resource.RLIM_INFINITY or hard > soft):
        wanted = FILES_NEEDED if hard == resource.RLIM_INFINITY else min(FILES_NEEDED, hard)
        resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))


async def _replicas(count: int) -> list[Child]:
    async def one(index: int) -> Child:
        port = free_port()
        args = ["--backend", "sim", "--port", str(port), "--served-model-name", MODEL,
                "--gen-token-s", str(GEN_TOKEN_S)]  # fmt: skip
        return await start_child(f"replica {index}", "replica_entry", args, port)

    return list(await asyncio.gather(*(one(i) for i in range(count))))


def _command(url: str, requests: int, seed: int, stream: bool) -> list[str]:
    return [
        sys.executable, "-m", "benchmarks.harness.blast", "--url", url, "--burst",
        "--requests", str(requests), "--tokens", str(PROMPT_TOKENS), "--seed", str(seed),
        "--served-model-name", MODEL, "--vocab", str(VOCAB), "--max-tokens", str(TOKENS),
        "--timeout", str(WAVE_TIMEOUT_S), *(["--stream"] if stream else []),
    ]  # fmt: skip


async def _counters(session: aiohttp.ClientSession, url: str) -> dict[str, float]:
    """The proxy's ejections by cause and stream migrations by outcome, summed by label."""
    async with session.get(url + "/metrics") as response:
        text = await response.text()
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "rollout_proxy_ejections_total":
                key = f"ejected:{sample.labels.get('cause', '?')}"
            elif sample.name == "rollout_proxy_stream_migrations_total":
                key = f"migrated:{sample.labels.get('outcome', '?')}"
            else:
                continue
            out[key] = out.get(key, 0.0) + sample.value
    return out


@contextlib.contextmanager
def _peak_rss(pid: int | None) -> Iterator[list[float]]:
    """The process's RSS sampled every ``SAMPLE_S`` while the block runs; ``[peak]`` after
    (``[0.0]`` for no process)."""
    peak = [0.0 if pid is None else _rss_mb(pid)]

    async def sample() -> None:
        while pid is not None:
            peak[0] = max(peak[0], _rss_mb(pid))
            await asyncio.sleep(SAMPLE_S)

    task = asyncio.get_running_loop().create_task(sample())
    try:
        yield peak
    finally:
        task.cancel()


async def _wave(
    target: str, requests: int, *, stream: bool, seed: int,
    proxy: Child | None = None, kill: Child | None = None,
) -> dict[str, Any]:  # fmt: skip
    """One wave at ``target`` (the proxy's URL, or the replicas' for the baseline)."""
    per = requests // CLIENTS
    commands = [_command(target, per, seed + i, stream) for i in range(CLIENTS)]
    async with aiohttp.ClientSession() as session:
        before = {} if proxy is None else await _counters(session, proxy.url)
        pid = None if proxy is None else proxy.process.pid
        cpu_before = 0.0 if pid is None else cpu_seconds(pid)
        with _peak_rss(pid) as peak:
            sent = asyncio.gather(*map(run_generator, commands))
            if kill is not None:
                await asyncio.sleep(KILL_AFTER_S)
                kill.process.kill()  # SIGKILL, by its PID
            runs = await sent
        cpu = 0.0 if pid is None else cpu_seconds(pid) - cpu_before
        after = {} if proxy is None else await _counters(session, proxy.url)
    latencies = sorted(x for r in runs for x in r["latencies"])
    statuses: dict[str, int] = {}
    for r in runs:
        for code, n in r["statuses"].items():
            statuses[code] = statuses.get(code, 0) + n
    sent_count = per * CLIENTS
    completed = sent_count - sum(r["errors"] for r in runs)
    changed = {k: v - before.get(k, 0.0) for k, v in after.items() if v != before.get(k, 0.0)}
    return {
        "wave": "streamed" if stream else "whole",
        "via": "direct" if proxy is None else "proxy",
        "sent": sent_count,
        "completed": completed,
        "statuses": statuses,
        "p50_s": _at(latencies, 0.5),
        "p99_s": _at(latencies, 0.99),
        "proxy_cpu_s": cpu,
        "proxy_peak_rss_mb": peak[0],
        "counters": changed,
        "killed": kill is not None,
        "failed": completed < sent_count,
    }


def _at(ordered: list[float], q: float) -> float:
    return ordered[min(int(len(ordered) * q), len(ordered) - 1)] if ordered else float("nan")


async def run(replicas: int, requests: int, hog_count: int, kill_one: bool) -> list[dict[str, Any]]:
    _raise_file_limit()
    async with children() as stack:
        fleet = await _replicas(replicas)
        stack.extend(fleet)
        proxy = await start_proxy([r.url for r in fleet], *LIMIT_FLAGS)
        stack.append(proxy)
        await wait_routable(proxy.url, len(fleet))
        rows = []
        with hogs(hog_count):
            for stream, seed in ((True, 1), (False, 101)):
                kind = "streamed" if stream else "non-streamed"
                report.progress(f"{requests} {kind} completions at once, straight to the replicas")
                direct = ",".join(r.url for r in fleet if r.process.returncode is None)
                baseline = await _wave(direct, requests, stream=stream, seed=seed)
                report.progress(f"{requests} {kind} completions at once, through the proxy")
                kill = fleet[0] if kill_one and stream else None
                proxied = await _wave(
                    proxy.url, requests, stream=stream, seed=seed, proxy=proxy, kill=kill
                )
                proxied["added_p50_s"] = proxied["p50_s"] - baseline["p50_s"]
                proxied["added_p99_s"] = proxied["p99_s"] - baseline["p99_s"]
                rows += [baseline, proxied]
    for row in rows:
        row.update(replicas=replicas, hogs=hog_count)
    return rows


def suite(args: argparse.Namespace) -> tuple[list[dict[str, Any]], str]:
    """``python -m benchmarks burst``: a first wave of new connections on a busy machine."""
    replicas, requests = QUICK if args.quick else (REPLICAS, REQUESTS)
    requests = args.requests or requests
    rows = asyncio.run(run(replicas, requests, args.hogs, args.kill_one))
    text = report.table(
        ["wave", "via", "replicas", "hogs", "sent", "completed", "statuses", "p50_s", "p99_s",
         "+p50_s", "+p99_s", "proxy_cpu_s", "peak_rss_mb", "counters"],
        [
            [r["wave"], r["via"], r["replicas"], r["hogs"], r["sent"], r["completed"],
             " ".join(f"{k}:{v}" for k, v in r["statuses"].items()), r["p50_s"], r["p99_s"],
             r.get("added_p50_s", "-"), r.get("added_p99_s", "-"),
             r["proxy_cpu_s"] if r["via"] == "proxy" else "-",
             r["proxy_peak_rss_mb"] if r["via"] == "proxy" else "-",
             " ".join(f"{k}={v:g}" for k, v in sorted(r["counters"].items())) or "-"]
            for r in rows
        ],
    )  # fmt: skip
    return rows, text
