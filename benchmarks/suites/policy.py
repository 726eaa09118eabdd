"""Suite ``policy``: the routing policy alone, per decision and in memory
(``benchmarks.micro.policy``), and the body reader and keys on worst-case request shapes
(``benchmarks.micro.worst_case``)."""

from __future__ import annotations

import argparse
from typing import Any

from benchmarks import report
from benchmarks.micro import worst_case
from benchmarks.micro.policy import measure, state_memory


def suite(args: argparse.Namespace) -> tuple[list[dict[str, Any]], str]:
    """``python -m benchmarks policy``: 1,000 and 4,000-token prompts, state after many."""
    rows: list[dict[str, Any]] = [
        measure(t, 8, 5000 if args.quick else 20000) for t in (1000, 4000)
    ]
    memory = state_memory(100_000 if args.quick else 1_000_000)
    text = report.table(
        ["tokens", "us/decision", "peek_us", "keys+cost_us", "select_us", "decisions/s"],
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
    heading = "worst-case request shapes (the routing facts: body reader, keys, cost; best of 3)"
    text += f"\n\n{heading}:\n" + report.table(
        ["shape", "MiB", "ms", "outcome"],
        [[w["shape"], w["bytes"] / worst_case.MIB, w["ms"], w["outcome"]] for w in worst],
    )
    return [*rows, {"memory": memory}, *({"worst_case": w} for w in worst)], text
