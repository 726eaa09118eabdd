"""The elastic study's chart: per workload shape, the step time over the run of each fixed fleet
and of the scaler (above), and the scaler's replicas over the run (below), on one time axis."""

from __future__ import annotations

from pathlib import Path
from typing import Any

SCALER_COLORS = ("black", "tab:red", "tab:orange", "tab:blue", "tab:purple")  # the scaler first
TITLES = {
    "growing": "lengths growing to 3x",
    "shrinking": "shrinking to 1/3",
    "constant": "constant",
}


def chart(path: Path, results: dict[str, Any]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = results["rows"]
    shapes = list(dict.fromkeys(r["shape"] for r in rows))
    fig, axes = plt.subplots(2, len(shapes), figsize=(5.2 * len(shapes), 6.4), sharex="col",
                             gridspec_kw={"height_ratios": [2.2, 1]}, squeeze=False)  # fmt: skip
    target = results["what_if"]["replicas"]
    for column, shape in enumerate(shapes):
        top, bottom = axes[0][column], axes[1][column]
        fixed = [r for r in rows if r["shape"] == shape and r["fleet"] == "fixed"]
        colors = plt.get_cmap("viridis")
        for i, r in enumerate(fixed):
            xs, ys = zip(*r["step_time_series"], strict=True)
            top.plot(xs, ys, color=colors(i / max(len(fixed) - 1, 1)), linewidth=1,
                     label=f"{r['label']} ({r['max_inflight_tasks']} in flight)")  # fmt: skip
        scaled = [r for r in rows if r["shape"] == shape and r["fleet"] == "scaler"]
        for i, r in enumerate(scaled):
            color = SCALER_COLORS[i % len(SCALER_COLORS)]
            main = r["label"] == "scaler"
            style = {"color": color, "linewidth": 2.2 if main else 1.4,
                     "linestyle": "-" if main else "--"}  # fmt: skip
            name = f"{r['label']} ({r['max_inflight_tasks']} in flight)"
            xs, ys = zip(*r["step_time_series"], strict=True)
            top.plot(xs, ys, label=name, **style)
            times = [t / 60 for t, *_ in r["timeline"]] + [r["wall_min"]]
            ready = [n for _, n, *_ in r["timeline"]]
            bottom.step(times, [*ready, ready[-1]], where="post", **style)
        bottom.axhline(target, color="grey", linestyle=":", linewidth=1)
        top.set_title(f"{TITLES.get(shape, shape)}", fontsize=10)
        top.set_ylabel("mean step over 10 steps (s)")
        bottom.set_ylabel("scaler: replicas ready")
        bottom.set_xlabel("minutes into the run")
        bottom.set_ylim(0, results["scenario"]["max_replicas"] + 0.5)
        top.legend(fontsize=6.5, loc="upper left")
    fig.suptitle("Elastic study: fixed fleets and the scaler (dotted: the what-if's fleet)",
                 fontsize=11)  # fmt: skip
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
