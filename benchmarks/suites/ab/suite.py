"""``python -m benchmarks ab``: two servers' CPU per request, paired, in front of the same
replicas.

A and B (``--a``, ``--b``: this checkout's proxy, the bare pass-through, or the proxy at a git
revision; ``targets``) run at once in front of the same three fast replicas; the same load goes
to one, then the other, round after round (``rounds``), and each round's ratio is B's CPU per
request over A's. Pairing within a round is what makes a 1-2 % difference readable on a machine
whose speed moves by more than that between minutes (benchmarks/README.md, the A/B section). The
output is each round's figures, then per prompt size the median ratio and its spread over the
clean rounds (``summary``); a round with an error is listed and left out, and the run exits 1.
"""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

from benchmarks import report
from benchmarks.suites.ab.rounds import Plan, measure
from benchmarks.suites.ab.summary import Round, Summary, as_json, summarize
from benchmarks.suites.ab.targets import Build, builds

ROUNDS, QUICK_ROUNDS = 8, 4
REQUESTS = {False: 10_000, True: 2_000}  # per side and round: whole answers, streamed ones
QUICK_SHARE = 5  # --quick sends a fifth

# The rounds table's columns, each with what it means (printed once, under the tables).
COLUMNS = {
    "round": "the round (both sides ran the same requests in it)",
    "first": "the side that ran first in the round",
    "A_cpu_us": "A's server process's CPU time per answered request, µs (from /proc)",
    "B_cpu_us": "the same for B",
    "B/A": "B_cpu_us / A_cpu_us (- for a round with errors: left out of the summary)",
    "A_rps": "requests/s through A",
    "B_rps": "requests/s through B",
    "A_err": "A's requests not answered 200 (streamed: not to data: [DONE])",
    "B_err": "the same for B",
}


def plan_of(args: argparse.Namespace) -> Plan:
    """The A/B the command line asks for, its defaults filled in."""
    requests = REQUESTS[args.stream] // (QUICK_SHARE if args.quick else 1)
    return Plan(
        a=args.a,
        b=args.b,
        tokens=tuple(args.tokens),
        rounds=args.rounds or (QUICK_ROUNDS if args.quick else ROUNDS),
        requests=args.requests or requests,
        concurrency=args.concurrency,
        stream_chunks=args.chunks if args.stream else 0,
        delay_s=args.replica_delay,
        order=args.order,
        run_timeout_s=args.run_timeout,
    )


def suite(args: argparse.Namespace) -> tuple[list[dict[str, Any]], str]:
    """``python -m benchmarks ab``: the rounds of each prompt size, their summaries."""
    plan = plan_of(args)
    with builds([plan.a, plan.b]) as found:
        a, b = found[plan.a], found[plan.b]
        report.progress(f"A = {a.label}; B = {b.label}")
        measured = asyncio.run(measure(plan, found, report.progress))
    rows, parts = [], [f"A = {a.label}\nB = {b.label}"]
    for tokens, rounds in measured:
        summary = summarize(rounds)
        rows.append(_row(plan, a, b, tokens, rounds, summary))
        parts.append(f"{describe(plan, tokens)}\n{table(rounds)}\n{closing(summary, rounds)}")
    legend = "\n".join(f"  {name}: {meaning}" for name, meaning in COLUMNS.items())
    return rows, "\n\n".join(parts) + "\n\n" + legend


def describe(plan: Plan, tokens: int) -> str:
    """A prompt size's heading: the load its rounds sent."""
    answers = (
        f"streamed completions of {plan.stream_chunks} chunks (return_token_ids)"
        if plan.stream_chunks
        else "completions of 16 tokens (return_token_ids)"
    )
    return (
        f"{tokens:,}-token prompts, {answers}; concurrency {plan.concurrency}, replica delay "
        f"{plan.delay_s * 1000:g} ms; {plan.rounds} rounds of {plan.requests:,} requests per "
        f"side, order {plan.order.upper()}"
    )


def table(rounds: list[Round]) -> str:
    lines = [
        [
            r.index,
            r.first,
            "-" if r.a.cpu_us is None else r.a.cpu_us,
            "-" if r.b.cpu_us is None else r.b.cpu_us,
            "-" if r.ratio is None else f"{r.ratio:.3f}",
            r.a.rps,
            r.b.rps,
            r.a.errors,
            r.b.errors,
        ]
        for r in rounds
    ]
    return report.table(list(COLUMNS), lines)


def closing(summary: Summary, rounds: list[Round]) -> str:
    """The summary line(s): the ratio's median and spread, each side's median, the dirty."""
    ratio = summary.ratio
    if ratio is None:
        return f"no clean round: all {len(rounds)} had errors; no ratio"
    text = (
        f"B/A median {ratio.median:.3f}, min-max {ratio.low:.3f}-{ratio.high:.3f}, "
        f"IQR {ratio.q1:.3f}-{ratio.q3:.3f} over {ratio.count} clean rounds of {len(rounds)}; "
        f"CPU per request (medians) A {summary.a_cpu_us:.1f} µs, B {summary.b_cpu_us:.1f} µs; "
        f"body bytes per answer A {_bytes(rounds, 'a'):,.0f}, B {_bytes(rounds, 'b'):,.0f}"
    )
    if summary.dirty:
        listed = ", ".join(map(str, summary.dirty))
        text += f"\nrounds with errors, left out: {listed}"
    return text


def _bytes(rounds: list[Round], side: str) -> float:
    """A side's body bytes per answer over all its answers (the same bytes on both sides is
    what makes the comparison fair)."""
    runs = [r.a if side == "a" else r.b for r in rounds]
    answered = sum(run.answered for run in runs)
    return sum(run.bytes for run in runs) / answered if answered else 0.0


def _row(
    plan: Plan, a: Build, b: Build, tokens: int, rounds: list[Round], summary: Summary
) -> dict[str, Any]:
    return {
        "a": plan.a.spec,
        "b": plan.b.spec,
        "a_build": a.label,
        "b_build": b.label,
        "a_commit": a.commit,
        "b_commit": b.commit,
        "tokens": tokens,
        "stream_chunks": plan.stream_chunks,
        "concurrency": plan.concurrency,
        "delay_ms": plan.delay_s * 1000,
        "requests": plan.requests,
        "order": plan.order,
        **as_json(rounds, summary),
        "failed": bool(summary.dirty),
    }
