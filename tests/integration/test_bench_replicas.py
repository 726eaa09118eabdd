"""``python -m benchmarks overhead --replicas URL`` measures in front of replicas it did not start.

A simulated replica stands in for a real vLLM server here: a different server from the
benchmarks' own fast replica, with its own model name and a short context the prompts must fit.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

from tests.support.fleet import run_sim


async def test_overhead_runs_against_given_replicas_in_their_model_and_context(
    tmp_path: Path,
) -> None:
    out = tmp_path / "overhead.json"
    async with run_sim(model="given-model", max_model_len=1024) as sim:
        process = await asyncio.create_subprocess_exec(
            *(sys.executable, "-m", "benchmarks", "overhead", "--quick"),
            *("--replicas", sim.url, "--requests", "130", "--json", str(out)),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        stdout, stderr = await asyncio.wait_for(process.communicate(), timeout=100)
    assert process.returncode == 0, stderr.decode()[-3000:]
    assert b"real replicas serving given-model (context 1024 tokens)" in stderr
    rows = json.loads(out.read_text())["results"]
    # The quick grid, fitted: no delay knob on real replicas, 3,000 tokens cut to the context.
    assert [(r["concurrency"], r["delay_ms"], r["tokens"]) for r in rows] == [
        (64, 0.0, 600),
        (64, 0.0, 992),
    ]
    for row in rows:
        assert row["model"] == "given-model"
        targets = row["targets"]
        assert all(targets[name]["errors"] == 0 for name in targets)
        assert targets["direct"]["cpu_us"] is None  # not our process: not measured
        assert targets["proxy"]["cpu_us"] > 0 and targets["passthrough"]["cpu_us"] > 0
    assert b"proxy_cpu_us" in stdout
