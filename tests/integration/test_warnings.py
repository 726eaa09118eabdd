"""What the proxy cannot fix, said at once and kept in view (``/proxy/status`` ``warnings``, the
advisor's ``advice.warnings``, one log line): a missing ``--adapters-dir`` until it appears (then
the watch starts), and a run whose share of ``max_loras`` is short of TRL's need."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from proxy.app import PROXY
from tests.support.adapters import write_adapter
from tests.support.fleet import Stack, eventually, run_stack, wait_for

WATCH: dict[str, Any] = {"watch_interval": 0.05, "advice_window": 1.0}  # a sample every 17 ms


async def status(stack: Stack, path: str = "/proxy/status") -> dict[str, Any]:
    async with stack.session.get(stack.proxy_url + path) as resp:
        assert resp.status == 200
        page: dict[str, Any] = await resp.json()
        return page


async def test_a_missing_adapters_dir_is_in_view_until_it_appears(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="proxy.watcher")
    root = tmp_path / "bucket" / "run" / ".vllm_lora"  # the bucket has not mounted yet
    missing = f"adapter directory {root} does not exist (yet)"
    async with run_stack(1, adapters_dir=str(root), **WATCH) as stack:

        async def in_view() -> bool:
            page = await status(stack)
            warned = [w for w in page["warnings"] if w.startswith(missing)]
            advised = [w for w in (page["advice"] or {}).get("warnings", []) if missing in w]
            return bool(warned and advised) and page["adapter_source"]["missing"] == missing

        await eventually(in_view, what="the missing directory in the status and the advice")
        warned = [
            r for r in caplog.records if r.levelno == logging.WARNING and missing in r.getMessage()
        ]
        assert len(warned) == 1
        write_adapter(root, "trl-policy-v1")  # the mount appears, with TRL's first save

        async def cleared() -> bool:
            page = await status(stack)
            return page["warnings"] == [] and page["adapter_source"]["missing"] is None

        await eventually(cleared, what="the warning cleared")
        sim = stack.sims[0]
        await wait_for(lambda: "trl-policy-v1" in sim.state.adapters, what="the version loaded")
    started = [r.getMessage() for r in caplog.records if r.getMessage().startswith("watching")]
    assert len(started) == 1 and started[0].startswith(
        f"watching directory {root} for adapter versions (it appeared after "
    )


async def test_a_run_whose_share_of_max_loras_is_short_is_warned(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """``--runs lr1e-5,lr3e-5,rank64=2`` on replicas with max_loras 6: lr1e-5's share is 1, so
    no max_staleness fits (TRL needs max_staleness + 2)."""
    caplog.set_level(logging.INFO, logger="proxy.runs")
    runs = "lr1e-5,lr3e-5,rank64=2"
    async with run_stack(2, runs=runs, sim={"max_loras": 6}, **WATCH) as stack:
        line = (
            "run lr1e-5 gets max_loras 1 (its share of the replicas' 6, weight 1 of 4); TRL needs "
            "max_staleness + 2, so no max_staleness fits; TRL's default max_staleness (4) needs "
            "6: give the replicas max_loras 24, declare fewer runs, or raise its weight"
        )

        async def warned() -> bool:
            page = await status(stack)
            run = page["runs"]["lr1e-5"]
            return (
                line in page["warnings"]
                and run["warning"] == line
                and line in ((run["advice"] or {}).get("warnings") or [])
            )

        await eventually(warned, what="the short share in the status and the run's advice")
        page = await status(stack, "/runs/lr1e-5/server_info")
        assert page["vllm_config"]["lora_config"]["max_loras"] == 1  # what TRL reads
        assert stack.proxy_app[PROXY].runs.share("rank64", 6) == 3
    lines = [(r.levelno, r.getMessage()) for r in caplog.records if r.name == "proxy.runs"]
    assert (logging.WARNING, line) in lines
    # Said once for the fleet's figures (two replicas, many info refreshes), one line per run.
    assert len(lines) == 3, lines
    assert all(level == logging.WARNING for level, _ in lines)  # rank64's 3 is short of 6 too


async def test_a_run_with_enough_is_said_once_in_an_info_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="proxy.runs")
    async with run_stack(1, runs="a,b", sim={"max_loras": 12}, **WATCH) as stack:

        def said() -> list[logging.LogRecord]:
            return [r for r in caplog.records if r.name == "proxy.runs"]

        await wait_for(lambda: len(said()) >= 2, what="the runs' lines")
        assert (await status(stack))["warnings"] == []
    lines = [(r.levelno, r.getMessage()) for r in caplog.records if r.name == "proxy.runs"]
    assert lines == [
        (logging.INFO, f"run {n} gets max_loras 6 (its share of the replicas' 12, weight 1 of "
         "2); TRL needs max_staleness + 2: it allows max_staleness up to 4")
        for n in ("a", "b")
    ]  # fmt: skip
