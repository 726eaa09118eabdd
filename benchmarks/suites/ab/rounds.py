"""The A/B's measurement: both sides up at once in front of the same fast replicas, the load
alternated between them round after round.

Three fast replicas (``benchmarks.harness.fast_replica``) and both sides are started once; each
prompt size then gets a warm-up per side (connections, caches; an error there stops the run) and
``rounds`` rounds. A round sends ``requests`` requests to one side, then as many to the other, the
same prompts (the round's seed), from two closed-loop load-generator processes at ``concurrency`` in
flight; the side going first alternates with ``abba`` (``summary.first_side``). A side's figure is
its server process's CPU time over its run (``/proc/PID/stat``: never the load generator's) over the
requests it answered; the idle side's background work (health probes, load scrapes) is not in it.
Every run is bounded (``run_timeout_s``: its load generators are killed); a side that exits ends the
A/B. Every process started is stopped by its PID when the A/B ends, however it ends
(``procs.children``). Cost per prompt size: 2 x (``rounds`` x ``requests`` + the warm-up) requests;
time at most 2 x (``rounds`` + 1) x ``run_timeout_s``, plus 30 s per process started.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from dataclasses import dataclass

from benchmarks.harness.cpu import cpu_seconds
from benchmarks.harness.procs import Child, children, start_child, start_proxy
from benchmarks.suites.ab.summary import Round, Side, first_side
from benchmarks.suites.ab.targets import Build, Target
from benchmarks.suites.overhead import Case, blast
from replica_entry.sim.loopback import free_port

REPLICAS = 3
LOADGENS = 2  # load-generator processes per run, as the overhead suite sends
WARM_REQUESTS = 400
HEALTH_WAIT_S = 1.0  # the proxy's first health round admits the replicas


@dataclass(frozen=True, slots=True)
class Plan:
    """What one A/B runs."""

    a: Target
    b: Target
    tokens: tuple[int, ...]  # prompt sizes, each its own set of rounds
    rounds: int
    requests: int  # per side and round
    concurrency: int
    stream_chunks: int  # 0: whole answers (16 tokens); else streamed answers of this many events
    delay_s: float  # the replicas' delay before answering
    order: str  # "abba" or "abab"
    run_timeout_s: float


async def measure(
    plan: Plan, found: dict[Target, Build], progress: Callable[[str], None]
) -> list[tuple[int, list[Round]]]:
    """Each prompt size's rounds, in ``plan.tokens`` order."""
    async with children() as stack:
        urls = []
        for i in range(REPLICAS):
            port = free_port()
            args = ["--port", str(port), "--delay-s", str(plan.delay_s)]
            if plan.stream_chunks:
                args += ["--stream-chunks", str(plan.stream_chunks)]
            stack.append(
                await start_child(f"replica {i}", "benchmarks.harness.fast_replica", args, port)
            )
            urls.append(stack[-1].url)
        sides = {}
        for name, target in (("A", plan.a), ("B", plan.b)):
            sides[name] = await _start(name, target, found[target], urls, plan.concurrency)
            stack.append(sides[name])
        await asyncio.sleep(HEALTH_WAIT_S)
        measured = []
        for tokens in plan.tokens:
            case = Case(
                plan.concurrency,
                plan.delay_s,
                tokens,
                stream=plan.stream_chunks > 0,
                max_tokens=plan.stream_chunks or 16,
            )
            await _warm(sides, case, plan)
            rounds = []
            for index in range(1, plan.rounds + 1):
                rounds.append(await _round(index, sides, case, plan))
                progress(_line(tokens, rounds[-1], plan.rounds))
            measured.append((tokens, rounds))
    return measured


async def _start(name: str, target: Target, build: Build, urls: list[str], conc: int) -> Child:
    label = f"{name}: {target.spec}"
    if target.kind == "passthrough":
        port = free_port()
        args = ["--port", str(port), "--upstream", ",".join(urls)]
        module = "benchmarks.harness.passthrough"
        return await start_child(label, module, args, port, cwd=build.tree, env=build.env)
    inflight = str(max(conc, 128))  # the load's concurrency, never the proxy's queue
    return await start_proxy(
        urls, "--max-inflight-per-replica", inflight, name=label, cwd=build.tree, env=build.env
    )


async def _warm(sides: dict[str, Child], case: Case, plan: Plan) -> None:
    for child in sides.values():
        warm = await blast(
            child.url, case, min(WARM_REQUESTS, plan.requests), 1, 99, plan.run_timeout_s
        )
        if warm["errors"]:
            raise RuntimeError(
                f"{child.name} answered {warm['errors']} of {warm['count']} warm-up requests "
                f"({case.tokens} tokens) with an error"
            )


async def _round(index: int, sides: dict[str, Child], case: Case, plan: Plan) -> Round:
    first = first_side(index, plan.order)
    ran = {}
    for name in (first, "B" if first == "A" else "A"):
        ran[name] = await _run(sides[name], case, plan, seed=index)
    return Round(index, first, ran["A"], ran["B"])


async def _run(child: Child, case: Case, plan: Plan, seed: int) -> Side:
    """One side's run: the load, and its server's CPU over it."""
    before = _cpu(child)
    try:
        result = await blast(child.url, case, plan.requests, LOADGENS, seed, plan.run_timeout_s)
    except TimeoutError:
        raise RuntimeError(
            f"{child.name} did not answer {plan.requests} requests within "
            f"{plan.run_timeout_s:.0f} s (raise --run-timeout, or send fewer --requests)"
        ) from None
    return Side(
        _cpu(child) - before,
        result["count"],
        result["errors"],
        result["wall_s"],
        result["bytes"],
        result["p50_ms"],
        result["p99_ms"],
    )


def _cpu(child: Child) -> float:
    """The side's CPU seconds so far; RuntimeError once it has exited."""
    if child.process.returncode is None:
        with contextlib.suppress(OSError):  # its /proc entry went with it
            return cpu_seconds(child.process.pid)
    raise RuntimeError(f"{child.name} exited (code {child.process.returncode})")


def _line(tokens: int, done: Round, rounds: int) -> str:
    ratio = "dirty" if done.ratio is None else f"B/A {done.ratio:.3f}"
    return f"{tokens} tokens, round {done.index}/{rounds} ({done.first} first): {ratio}"
