"""Whether K runs of one shape should share a fleet (issue #25), from the sharing model itself.

``python -m benchmarks fleet --what-if --share-runs K``: after ``--what-if`` picks R replicas
(and the in-flight count) for ONE run, ``sharing.grid`` simulates K such runs on shared fleets
of M = 1..``--max-replicas`` against K fleets of R (``--separate-replicas`` overrides R), and
``recommend`` reads its rows: share, on the layout with the fewest GPU-hours per run-step among
those that pay (at most ``sharing.PAYS_GPU`` x the GPU-hours at no more than
``sharing.PAYS_STEP`` x the step), or do not, saying why: the layouts cheap enough are too slow
(the shared replicas fill up), or those fast enough are not cheap enough (R is already about
what one run needs, so pooling finds little idle capacity), or no layout fits ``max_loras``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from benchmarks.fleet.sharing import PAYS_GPU, PAYS_STEP


def _figures(row: dict[str, Any]) -> str:
    return f"{row['gpu_ratio']:.2f} x the GPU-hours at {row['step_ratio']:.2f} x the step"


def recommend(rows: Sequence[dict[str, Any]], runs: int) -> dict[str, Any]:
    """The verdict for ``runs`` runs from ``sharing.grid`` rows: ``share`` (bool), the layout
    (``replicas``, ``separate_replicas``, ``gpu_ratio``, ``step_ratio``) and its ``line``."""
    fitting = [r for r in rows if r["runs"] == runs and r["feasible"]]
    if not fitting:
        return {
            "share": False,
            "runs": runs,
            "line": f"do not share: no fleet of these sizes holds {runs} runs' adapter windows "
            "(each run needs a share of max_staleness + 2; raise --max-loras)",
        }
    paying = [r for r in fitting if r["pays"]]
    best = min(paying or fitting, key=lambda r: (r["gpu_ratio"], r["step_ratio"]))
    separate = best["separate_replicas"]
    verdict = {
        "share": bool(paying),
        "runs": runs,
        "replicas": best["replicas"],
        "separate_replicas": separate,
        "gpu_ratio": best["gpu_ratio"],
        "step_ratio": best["step_ratio"],
    }
    if paying:
        verdict["line"] = (
            f"share: {runs} runs on {best['replicas']} replicas: {best['gpu_ratio']:.2f} x the "
            f"GPU-hours per run-step of {runs} fleets of {separate}, {best['step_ratio']:.2f} x "
            "the step time"
        )
        return verdict
    cheap = [r for r in fitting if r["gpu_ratio"] <= PAYS_GPU]
    fast = [r for r in fitting if r["step_ratio"] <= PAYS_STEP]
    saving = f"{100 * (1 - PAYS_GPU):.0f} % of the GPU-hours"
    if cheap:  # every layout that saves enough is too slow
        fastest = min(cheap, key=lambda r: r["step_ratio"])
        why = (
            f"the layouts that save {saving} are slower than {PAYS_STEP:g} x the step: the "
            f"shared replicas fill up ({runs} runs on {fastest['replicas']}: {_figures(fastest)})"
        )
    elif fast:  # fast enough layouts exist, none saves enough
        best = min(fast, key=lambda r: r["gpu_ratio"])
        why = (
            f"the layouts within {PAYS_STEP:g} x the step save less than {saving}: a fleet of "
            f"{separate} is already about what one run needs, so sharing finds little idle "
            "capacity to pool"
        )
    else:
        largest = max(r["replicas"] for r in fitting)
        why = (
            f"every layout up to {largest} replicas is slower than {PAYS_STEP:g} x the step: "
            "the shared replicas fill up (more replicas: --max-replicas)"
        )
    verdict.update(replicas=best["replicas"], gpu_ratio=best["gpu_ratio"],
                   step_ratio=best["step_ratio"])  # fmt: skip
    verdict["line"] = (
        f"do not share: the best layout ({runs} runs on {best['replicas']}) is "
        f"{_figures(best)} of {runs} fleets of {separate}; {why}"
    )
    return verdict
