"""``python -m benchmarks overhead``'s table says what each column is, and its chart names each
cell in words, not ``c64/d0/t600``."""

from __future__ import annotations

from typing import Any

from benchmarks.suites.overhead import cell_label, table


def a_row() -> dict[str, Any]:
    target = {"rps": 1000.0, "cpu_us": 150.0}
    return {
        "concurrency": 64,
        "delay_ms": 0.0,
        "tokens": 600,
        "targets": {"direct": target, "passthrough": target, "proxy": {**target, "cpu_us": 180.0}},
        "proxy_cpu_ratio": 1.2,
        "added_p50_ms": 0.3,
        "added_p99_ms": 4.8,
        "proxy_ceiling_rps": 5555.6,
    }


def test_every_column_has_a_legend_line() -> None:
    lines = table([a_row()]).splitlines()
    columns = lines[0].split()
    legend = {line.split(":")[0].strip() for line in lines[2:]}
    assert "ceiling_rps" in columns and "passthru_cpu_us" in columns
    assert set(columns) == legend
    assert any("1e6 / proxy_cpu_us" in line for line in lines[2:])


def test_a_chart_cell_is_named_in_words() -> None:
    assert cell_label(a_row()) == "64 conns, 0 ms delay, 600 tokens"
