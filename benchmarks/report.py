"""Benchmark reports: progress lines, the environment, a printed table, JSON, and PNG charts."""

from __future__ import annotations

import contextlib
import json
import os
import platform
import sys
import time
from collections.abc import Iterator, Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

# Every file this run wrote (its JSON, its charts), for the closing line that names them.
_written: list[Path] = []


def progress(message: str) -> None:
    """A line on stderr while a suite runs (stdout holds the table)."""
    sys.stderr.write(f"  .. {message}\n")
    sys.stderr.flush()


def environment(settings: dict[str, Any]) -> dict[str, Any]:
    versions: dict[str, str | None] = {}
    for name in ("aiohttp", "uvloop", "orjson", "xxhash", "prometheus-client", "rollout-proxy"):
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return {
        "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "cpu_count": os.cpu_count(),
        "machine": platform.machine(),
        "python": sys.version.split()[0],
        "versions": versions,
        "settings": settings,
    }


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    cells = [[_fmt(v) for v in row] for row in rows]
    widths = [max(len(h), *(len(r[i]) for r in cells)) for i, h in enumerate(headers)]
    lines = ["  ".join(h.rjust(w) for h, w in zip(headers, widths, strict=True))]
    lines += ["  ".join(c.rjust(w) for c, w in zip(row, widths, strict=True)) for row in cells]
    return "\n".join(lines)


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.3f}" if abs(value) < 10 else f"{value:.1f}"
    return str(value)


def output_problem(json_path: Path | None, plot_dir: Path | None) -> str | None:
    """Why ``--json`` or ``--plot`` could not be written, told before a suite runs (for
    minutes), or None."""
    from proxy.config.paths import directory_problem

    if json_path is not None and (problem := directory_problem("--json", json_path.parent)):
        return problem
    return None if plot_dir is None else directory_problem("--plot", plot_dir)


def write_json(path: Path, suite: str, env: dict[str, Any], results: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"suite": suite, "environment": env, "results": results}, indent=1))
    _written.append(path)


def take_written() -> list[Path]:
    """The files written since the last call, in order (a run's closing line names them all)."""
    paths = list(_written)
    _written.clear()
    return paths


def closing_line(paths: Sequence[Path]) -> str:
    """``wrote A, B, C``: every file a run wrote, so none is looked for in vain; empty if none."""
    return "wrote " + ", ".join(str(p) for p in paths) if paths else ""


@contextlib.contextmanager
def _chart(path: Path, title: str, ylabel: str, size: tuple[float, float]) -> Iterator[Any]:
    """A matplotlib axes (headless backend); titled, legended and saved as PNG on exit."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=size)
    yield ax
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    _written.append(path)


def bar_chart(
    path: Path,
    title: str,
    labels: list[str],
    series: dict[str, list[float]],
    ylabel: str,
    *,
    bounds: dict[str, list[float | None]] | None = None,
    reference: tuple[str, list[float]] | None = None,
) -> None:
    """Grouped bars, one group per label. ``bounds``: per series, a value per label drawn as a
    black tick across its bar (legend "bound"), not as a bar of its own: a bound is no policy.
    ``reference``: (its name, a value per label) drawn as a dashed line across the group."""
    with _chart(path, title, ylabel, (max(6.0, len(labels) * 1.2), 4.5)) as ax:
        width = 0.8 / max(len(series), 1)
        for index, (name, values) in enumerate(series.items()):
            xs = [i + index * width for i in range(len(labels))]
            ax.bar(xs, values, width, label=name)
            ticks = [(x, b) for x, b in zip(xs, (bounds or {}).get(name, []), strict=False)]
            for x, b in ticks:
                if b is not None:
                    ax.hlines(b, x - width / 2, x + width / 2, colors="black", linewidth=2)
        if bounds:
            ax.plot([], [], color="black", linewidth=2, label="bound")
        if reference:
            name, values = reference
            for i, value in enumerate(values):
                ax.hlines(value, i - width / 2, i + 0.8 - width / 2, colors="grey",
                          linestyles="dashed", label=name if i == 0 else None)  # fmt: skip
        ax.set_xticks([i + 0.4 - width / 2 for i in range(len(labels))], labels, fontsize=8,
                      rotation=30, ha="right")  # fmt: skip


def line_chart(
    path: Path, title: str, xs: list[float], series: dict[str, list[float]], ylabel: str
) -> None:
    with _chart(path, title, ylabel, (7, 3.5)) as ax:
        for name, values in series.items():
            ax.plot(xs, values, label=name)
        ax.set_xlabel("seconds")


def scatter_chart(
    path: Path,
    title: str,
    series: dict[str, list[tuple[float, float]]],
    xlabel: str,
    ylabel: str,
    *,
    marked: tuple[str, tuple[float, float]] | None = None,
) -> None:
    """Points (x, y) per series; ``marked``: one point ringed and named (a recommendation)."""
    with _chart(path, title, ylabel, (7, 4.5)) as ax:
        for name, points in series.items():
            ax.plot([x for x, _ in points], [y for _, y in points], "o-", label=name, ms=4)
        if marked is not None:
            name, (x, y) = marked
            ax.plot([x], [y], "o", ms=14, mfc="none", mec="black", label=name)
        ax.set_xlabel(xlabel)
