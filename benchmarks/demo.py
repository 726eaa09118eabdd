"""``make demo``: three simulated replicas, the proxy, a short GRPO-shaped load, a summary.

Everything runs on loopback as separate processes, as users run them. The demo ends by itself
(well under two minutes) and stops every process it started.
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import time
from collections import Counter

from benchmarks.harness.loadgen import LoadGenerator, LoadResult
from benchmarks.harness.procs import (
    Child,
    children,
    start_child,
    start_proxy,
    stop_child,
    wait_routable,
)
from benchmarks.harness.trace import TraceShape
from proxy.config.deprecated import DeprecatedNames
from proxy.config.programs import OneLineParser, RawDescriptionDefaultsFormatter, help_text
from replica_entry.sim.loopback import free_port

# Simulated replica speed: 0.05 ms per uncached prompt token, 4 ms per generated token, with a
# batch effect, so cache hits and balance show in the latency as they would on a GPU.
SIM_FLAGS = ["--prompt-token-s", "0.00005", "--gen-token-s", "0.004", "--overhead-s", "0.002",
             "--batch-factor", "0.005", "--block-size", "16", "--cache-blocks", "2048"]  # fmt: skip


class Progress:
    """A progress bar on stderr: redrawn in place on a terminal, a line per 10 % otherwise."""

    def __init__(self, total: int, width: int = 40) -> None:
        self.total, self.width, self.started = total, width, time.monotonic()
        self.tty = sys.stderr.isatty()
        self.step = 16 if self.tty else max(total // 10, 1)

    def __call__(self, done: int) -> None:
        if done != self.total and done % self.step:
            return
        filled = int(self.width * done / self.total)
        rate = done / max(time.monotonic() - self.started, 1e-9)
        bar = "#" * filled + "-" * (self.width - filled)
        line = f"  [{bar}] {done}/{self.total} requests  {rate:6.0f} req/s"
        sys.stderr.write(f"\r{line}" if self.tty else f"{line}\n")
        if self.tty and done == self.total:
            sys.stderr.write("\n")
        sys.stderr.flush()


async def start_fleet(replicas: int, stack: list[Child]) -> Child:
    for i in range(replicas):
        port = free_port()
        args = ["--backend", "sim", "--port", str(port), "--seed", str(i), *SIM_FLAGS]
        stack.append(await start_child(f"replica {i + 1}", "replica_entry", args, port))
        print(f"  replica {i + 1} ready at {stack[-1].url}")
    proxy = await start_proxy([child.url for child in stack])
    stack.append(proxy)
    print(f"  proxy ready at {proxy.url}")
    await wait_routable(proxy.url, replicas)
    return proxy


def summary(result: LoadResult, replicas: list[str]) -> str:
    samples = result.samples
    ok = [s for s in samples if s.status == 200]
    latencies = sorted(s.latency_s * 1000 for s in ok)
    share = Counter(s.replica for s in ok)
    prompt = sum(s.prompt_tokens for s in ok)
    cached = sum(s.cached_tokens for s in ok)
    p99 = latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))] if latencies else 0.0
    lines = [
        "",
        f"  requests        {len(samples)} ({len(ok)} ok, {len(result.errors)} failed)",
        f"  throughput      {len(samples) / result.wall_s:.0f} req/s over {result.wall_s:.1f} s",
        f"  latency         p50 {statistics.median(latencies) if latencies else 0:.1f} ms"
        f"   p99 {p99:.1f} ms",
        f"  cache hit rate  {100 * cached / max(prompt, 1):.1f} % of prompt tokens "
        f"({cached} of {prompt})",
        "  per replica:",
    ]
    for replica in replicas:
        count = share.get(replica, 0)
        lines.append(
            f"    {replica:<22} {count:6d} requests  {100 * count / max(len(ok), 1):5.1f} %"
        )
    return "\n".join(lines)


async def run(replicas: int, shape: TraceShape, concurrency: int) -> int:
    print(f"rollout-proxy demo: {replicas} simulated replicas behind one proxy")
    async with children() as stack:
        proxy = await start_fleet(replicas, stack)
        generator = LoadGenerator(proxy.url, shape, model="sim-model", concurrency=concurrency)
        print(f"  while it runs: {proxy.url}/metrics and {proxy.url}/proxy/status")
        print(
            f"\n  GRPO-shaped load: {shape.prompts} prompts x {shape.group_size} rollouts x "
            f"{shape.turns} turns, shared {shape.template_tokens}-token template, "
            f"{concurrency} in flight"
        )
        result = await generator.run_with(Progress(generator.total_requests))
        print(summary(result, [child.url.split("//")[1] for child in stack[:-1]]))
        print(f"\n  metrics: {proxy.url}/metrics    status: {proxy.url}/proxy/status")
        print("  (up only while the demo runs; `python -m proxy --help` serves your own fleet)")
        code = await stop_child(proxy)
        print(f"\n  stopped the proxy (exit {code}) and {replicas} replicas")
    return 0 if not result.errors else 1


def main(argv: list[str] | None = None) -> int:
    parser = OneLineParser(
        prog="python -m benchmarks.demo",
        description=help_text(__doc__),
        formatter_class=RawDescriptionDefaultsFormatter,
    )
    add = parser.add_argument
    add("--replica-count", "--replicas", action=DeprecatedNames, dest="replicas", type=int,
        deprecated={"--replicas": "--replicas is a list of replica URLs in rollout-proxy"},
        default=3, metavar="N", help="simulated replicas behind the proxy")  # fmt: skip
    add("--prompts", type=int, default=96, help="GRPO prompts in the trace")
    add("--group-size", type=int, default=8, help="rollouts per prompt")
    add("--turns", type=int, default=3, help="turns of each rollout (1: single-turn)")
    add("--concurrency", type=int, default=64, help="requests in flight at once")
    args = parser.parse_args(argv)
    shape = TraceShape(prompts=args.prompts, group_size=args.group_size, turns=args.turns)
    return asyncio.run(run(args.replicas, shape, args.concurrency))


if __name__ == "__main__":
    raise SystemExit(main())
