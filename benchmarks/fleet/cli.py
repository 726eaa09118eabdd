"""``python -m benchmarks fleet [--quick] [--json OUT] [--plot DIR] [model flags] [--what-if]``.

Without ``--what-if``: the published run reproduced, then the grid (workloads x 2/8/16/64
replicas x policies, each run with its lower bound, and the steady-state reference). With
``--what-if``: for the model, GPU and TRL settings given, the step time for
1..``--max-replica-count`` replicas and 1-4 steps' worth of rollouts in flight, and the smallest
fleet within 5 % of the best. Every constant of the
models is a flag (``--help``); ``--sync-s`` takes a measured sync time (e.g. from the sync
suite or a real run), ``--sync-mode push --sync-push-s`` a push model; the sync's phases are
``--sync-pause-s --sync-barrier-s --sync-save-s --sync-push-s --sync-resume-s
--sync-unload-s``, and ``--sync-frozen yes|no`` says whether the fleet stops generating during
a sync (the trainer waits for it either way). Booleans are ``yes`` or ``no``; a ``-s`` flag
takes seconds (``0.3``) or a unit (``300ms``). ``--run-count K`` (one layout, on
``--shared-replica-count``) and ``--shared-grid`` (K 2, 4, 8 x 1..``--max-replica-count``)
compare K runs sharing one fleet with K separate fleets (``sharing.py``, issue #25). A count of
replicas or runs is ``-replica-count``/``-run-count`` here as in ``rollout-deploy``; the earlier
names (``--max-replicas``, ...) still work, and those that mean something else in another
program are deprecated (``proxy.config.deprecated``): the run count's, the model shape's and
TRL's in-flight count's.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks import report
from benchmarks.fleet.advice import recommend
from benchmarks.fleet.elastic_chart import chart as elastic_chart
from benchmarks.fleet.elastic_rows import acceptance_lines
from benchmarks.fleet.elastic_study import study as elastic_study
from benchmarks.fleet.model import GpuModel, ProxyModel, SyncModel, TrainerModel
from benchmarks.fleet.sharing import SHARING_LEGEND, grid, sharing_table
from benchmarks.fleet.suite import run_grid, validate
from benchmarks.fleet.waste_study import study
from benchmarks.fleet.whatif import PROJECT_SYNC, Costs, chart, lines, what_if
from benchmarks.fleet.workloads import WORKLOADS
from benchmarks.references import legend, marked
from proxy.config.deprecated import DeprecatedNames
from proxy.config.programs import (
    OneLineParser,
    RawDescriptionDefaultsFormatter,
    help_text,
    version_flag,
)
from proxy.config.units import DurationArg, SizeArg

# GPU: memory (GB), HBM bandwidth (TB/s), dense bf16 peak (TFLOP/s); vendor data sheets.
GPUS = {
    "h200": (141.0, 4.8, 989.0),
    "h100": (80.0, 3.35, 989.0),
    "a100": (80.0, 2.0, 312.0),
    "l40s": (48.0, 0.864, 362.0),
}
# Model: parameters (billions), KV bytes per token (layers x KV heads x head dim x 2 x 2 bytes).
MODELS = {
    "qwen2.5-1.5b": (1.54, 28 * 2 * 128 * 2 * 2),
    "qwen2.5-7b": (7.6, 28 * 4 * 128 * 2 * 2),
    "llama-3.1-8b": (8.0, 32 * 8 * 128 * 2 * 2),
}


def gpu_for(gpu: str, model: str, params_b: float | None, kv_bytes: int | None) -> GpuModel:
    """A replica's constants for another GPU or model, scaled from the calibrated ones: the
    weights read once per step at the GPU's bandwidth, prefill at 40 % of its peak, KV read
    at its bandwidth, the rest of the step (scheduler, sampler: CPU work) unchanged."""
    base = GpuModel()  # calibrated: Qwen2.5-1.5B on an H200
    memory, bandwidth, peak = GPUS[gpu]
    params, kv = MODELS[model]
    params = params_b if params_b is not None else params
    kv = kv_bytes if kv_bytes is not None else kv
    weights = 2 * params * 1e9
    base_weights_s = 2 * 1.54e9 / 4.8e12
    prefill_token_s = 2 * params * 1e9 / (0.4 * peak * 1e12)
    base_prefill_s = 2 * 1.54e9 / (0.4 * 989e12)
    blocks = int((memory * 0.9e9 - weights - 5e9) / kv / 16)
    return GpuModel(
        step_s=base.step_s - base_weights_s + weights / (bandwidth * 1e12),
        prefill_token_s=prefill_token_s,
        seq_s=base.seq_s - base_prefill_s + prefill_token_s,
        kv_token_s=kv / (bandwidth * 1e12),
        kv_blocks=max(blocks, 1),
    )


def _dest(prefix: str, name: str) -> str:
    """``sync_`` + ``every`` -> ``sync_every``; ``sync_`` + ``sync_s`` -> ``sync_s``."""
    return name if name.startswith(prefix) else prefix + name


def yes_no(text: str) -> bool:
    """``yes`` or ``no`` (a boolean flag's value)."""
    if text not in ("yes", "no"):
        raise argparse.ArgumentTypeError(f"expected yes or no, got {text!r}")
    return text == "yes"


SECONDS = DurationArg()  # a model's ``_s`` field: seconds, or a unit (300ms)


def _add_fields(parser: argparse.ArgumentParser, cls: Any, prefix: str = "") -> None:
    """A flag per field of ``cls`` (absent: None, so ``build`` keeps the base's value)."""
    group = parser.add_argument_group(cls.__name__)
    for field in dataclasses.fields(cls):
        dest, meta = _dest(prefix, field.name), field.metadata
        default: Any = field.default
        kind: Any = {int: int, float: float, str: str}.get(type(default), float)
        shown = "none" if default is None else str(default)
        if isinstance(default, bool):
            kind, shown = yes_no, "yes" if default else "no"
        elif field.name.endswith("_s"):
            kind, shown = SECONDS, "none" if default is None else SECONDS.show(default)
        flag = "--" + meta.get("flag", dest).replace("_", "-")
        old = meta.get("deprecated", {})
        group.add_argument(flag, *old, action=DeprecatedNames, deprecated=old, dest=dest,
                           type=kind, default=None, choices=meta.get("choices"),
                           help=f"{meta['help']} (default: {shown})")  # fmt: skip


def build(cls: Any, args: argparse.Namespace, prefix: str = "", base: Any = None) -> Any:
    """``base`` (default ``cls()``) with the flags given for ``cls``'s fields."""
    base = base if base is not None else cls()
    given = {
        f.name: getattr(args, _dest(prefix, f.name))
        for f in dataclasses.fields(cls)
        if getattr(args, _dest(prefix, f.name)) is not None
    }
    return dataclasses.replace(base, **given)


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="python -m benchmarks fleet",
        description=help_text(__doc__),
        formatter_class=RawDescriptionDefaultsFormatter,
    )
    version_flag(parser, "python -m benchmarks")
    add = parser.add_argument
    add("--quick", action="store_true", help="a smaller grid (under a minute)")
    add("--json", type=Path, metavar="PATH", help="write the rows (with the environment) here")
    add("--plot", type=Path, metavar="DIR", help="write PNG charts into this directory")
    add("--workloads", help=f"comma-separated, of {', '.join(WORKLOADS)} (default: all)")
    add("--sizes", help="comma-separated fleet sizes (default: 2,8,16,64; 2,8 with --quick)")
    add("--grid-pressure", type=float, default=1.5, help="grid: fleet time / trainer time")
    add("--what-if", action="store_true", help="how many replicas and what max_inflight_tasks")
    add("--max-replica-count", "--max-replicas", dest="max_replicas", type=int, metavar="N",
        default=8, help="what-if: fleets of 1..this many replicas")  # fmt: skip
    add("--waste-study", action="store_true",
        help="can the proxy cut the waste of TRL's in-flight count (waste_study.py)")  # fmt: skip
    add("--elastic", action="store_true",
        help="the scaler against fixed fleets, lengths changing (elastic_study.py)")  # fmt: skip
    add("--study-replica-count", "--study-replicas", dest="study_replicas", type=int,
        metavar="N", default=3, help="waste study: the fleet's replicas")  # fmt: skip
    add("--workload", default="long_tail", choices=sorted(WORKLOADS), help="what-if workload")
    add("--gpu", choices=sorted(GPUS), help="what-if: scale the replica model to this GPU")
    add("--model-shape", "--model", action=DeprecatedNames, dest="model", choices=sorted(MODELS),
        deprecated={"--model": "--model is a Hub id or a folder in the other programs"},
        default="qwen2.5-1.5b",
        help="what-if: the model's shape (its parameters, KV bytes per token)")  # fmt: skip
    add("--run-count", "--runs", action=DeprecatedNames, dest="runs", type=int, metavar="N",
        deprecated={"--runs": "--runs names the runs sharing a fleet in rollout-proxy"},
        help="sharing: K runs on one fleet of --shared-replica-count (#25)")  # fmt: skip
    add("--share-run-count", "--share-runs", dest="share_runs", type=int, metavar="N",
        help="what-if: whether K runs of this shape should share a fleet (advice.py)")  # fmt: skip
    add("--shared-replica-count", "--shared-replicas", dest="shared_replicas", type=int,
        metavar="N", default=3, help="sharing: the shared fleet's replicas M")  # fmt: skip
    add("--shared-grid", action="store_true",
        help="sharing: K 2,4,8 x M 1..8, as given and with train_s doubled")  # fmt: skip
    add("--separate-replica-count", "--separate-replicas", dest="separate_replicas", type=int,
        metavar="N", help="sharing: each separate fleet's size (default: what-if's)")  # fmt: skip
    add("--trainer-gpus", type=int, default=2,
        help="what-if, sharing: GPUs of each run's trainer (deploy's h200x2)")  # fmt: skip
    add("--replica-gpus", type=int, default=1, help="what-if: GPUs of each replica")
    add("--max-waste", type=float, default=0.03,
        help="what-if: the share of generated tokens a recommended setting may waste")  # fmt: skip
    add("--max-slowdown", type=float, default=0.05,
        help="what-if: how much slower than the fastest a recommended one may step")  # fmt: skip
    add(
        "--sync-published",
        action="store_true",
        help="what-if: the published sync (a frozen fleet, mount loads) as the base of the "
        "sync flags instead of this project's (a push, the fleet generating through it)",
    )
    add("--params-b", type=float,
        help="what-if: model parameters, billions (default: the model shape's)")  # fmt: skip
    add("--kv-bytes-per-token", type=SizeArg(),
        help="what-if: KV cache bytes per token (default: the model shape's)")  # fmt: skip
    _add_fields(parser, GpuModel)
    _add_fields(parser, TrainerModel)
    _add_fields(parser, SyncModel, "sync_")
    _add_fields(parser, ProxyModel)
    return parser


def main(argv: list[str]) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.share_runs is not None:
        if not args.what_if or args.runs or args.shared_grid:
            parser.error(
                "argument --share-run-count: with --what-if only (not --run-count, --shared-grid)"
            )
        if args.share_runs < 2:
            parser.error(f"argument --share-run-count: at least 2 runs (got {args.share_runs})")
    if problem := report.output_problem(args.json, args.plot):
        parser.error(problem)
    started = time.monotonic()
    report.take_written()  # a run names only what it wrote itself
    gpu = GpuModel()
    if args.gpu or args.params_b or args.kv_bytes_per_token or args.model != "qwen2.5-1.5b":
        gpu = gpu_for(args.gpu or "h200", args.model, args.params_b, args.kv_bytes_per_token)
    gpu = build(GpuModel, args, base=gpu)
    trainer = build(TrainerModel, args)
    sync = sync_for(args)
    proxy = build(ProxyModel, args, base=ProxyModel(per_replica_cap=192))
    mode = (" (quick)" if args.quick else "") + (" what-if" if args.what_if else "")
    if args.shared_grid or args.runs:
        mode += " sharing"
        print(f"benchmarks: suite fleet{mode}")
        results, text = _sharing(args, gpu, trainer, sync, proxy)
    elif args.what_if:
        print(f"benchmarks: suite fleet{mode}")
        results, text = _what_if(args, gpu, trainer, sync, proxy)
    elif args.elastic:
        print(f"benchmarks: suite fleet elastic study{mode}")
        results, text = _elastic(args, gpu, trainer, sync, proxy)
    elif args.waste_study:
        print(f"benchmarks: suite fleet waste study{mode}")
        rows = study(WORKLOADS[args.workload], gpu, trainer, sync, proxy,
                     replicas=args.study_replicas, quick=args.quick)  # fmt: skip
        results = {"rows": rows}
        text = report.table(
            ["variant", "trl_inflight", "proxy_cap", "mean_step_s", "wasted_share",
             "proxy_stale", "proxy_group_stale"],
            [[r["variant"], r["trl_inflight"], r["proxy_cap"], r["step_time_mean_s"],
              r["wasted_share"], r["proxy_stale_share"], r["proxy_group_stale_share"]]
             for r in rows],
        )  # fmt: skip
    else:
        print(f"benchmarks: suite fleet{mode}")
        results, text = _suite(args, gpu, trainer, sync, proxy)
    print(text)
    print(f"({time.monotonic() - started:.0f} s)")
    if args.json:
        settings = {
            "suite": "fleet",
            "quick": args.quick,
            "gpu": dataclasses.asdict(gpu),
            "trainer": dataclasses.asdict(trainer),
            "sync": dataclasses.asdict(sync),
            "proxy": dataclasses.asdict(proxy),
        }
        report.write_json(args.json, "fleet", report.environment(settings), results)
    if closing := report.closing_line(report.take_written()):
        print(closing)
    return 0


def sync_for(args: argparse.Namespace) -> SyncModel:
    """The sync the flags describe: for a what-if, over this project's sync (the published one
    with ``--sync-published``); otherwise over the published one, which the suite reproduces."""
    project = (args.what_if or args.waste_study or args.elastic) and not args.sync_published
    synced: SyncModel = build(SyncModel, args, "sync_", base=PROJECT_SYNC if project else None)
    return synced


def _progress(message: str) -> None:
    sys.stderr.write(f"  .. {message}\n")
    sys.stderr.flush()


def _suite(
    args: argparse.Namespace, gpu: GpuModel, trainer: TrainerModel, sync: SyncModel, proxy: Any
) -> tuple[Any, str]:
    checks = validate(gpu, trainer, sync, quick=args.quick)
    published = "published run (huggingface.co/blog/asyncgrpo-lora-hfjobs), prefix policy:\n"
    text = published + report.table(
        ["in_flight", "replicas", "mean_s", "p50_s", "bound_s", "steady_s", "published_s", "hit",
         "wasted"],
        [[r["max_inflight"], r["replicas"], r["step_time_mean_s"], r["step_time_p50_s"],
          r["lower_bound_s"], r["steady_state_s"], r["published_s"] or "-", r["hit_rate"],
          r["wasted_tokens"]] for r in checks],
    )  # fmt: skip
    workloads = tuple(args.workloads.split(",")) if args.workloads else None
    sizes = tuple(int(s) for s in args.sizes.split(",")) if args.sizes else None
    rows = run_grid(gpu, trainer, sync, proxy, quick=args.quick, pressure=args.grid_pressure,
                    workloads=workloads, sizes=sizes, progress=_progress)  # fmt: skip
    text += "\n\n" + report.table(
        ["workload", "replicas", "policy", "p50_s", "p99_s", "mean_s", "bound_s", "of_bound",
         "of_steady", "hit", "util", "preempt", "wasted"],
        [[r["workload"], r["replicas"], marked(r["policy"]), r["step_time_p50_s"],
          r["step_time_p99_s"],
          r["step_time_mean_s"], r["lower_bound_s"] or "-", r["of_lower_bound"] or "-",
          r["of_steady_state"], r["hit_rate"], r["utilization"], r["preemptions"],
          r["wasted_tokens"]] for r in rows],
    )  # fmt: skip
    text += "\n" + legend(r["policy"] for r in rows)
    if args.plot:
        step_time_chart(args.plot / "fleet_step_time.png", rows)
    return {"validation": checks, "rows": rows}, text


def step_time_chart(path: Path, rows: list[dict[str, Any]]) -> None:
    report.bar_chart(path, ylabel="seconds", **step_time_figure(rows))


def step_time_figure(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Mean step time per policy, grouped by workload and fleet size; each run's lower bound a
    tick on its bar and the steady-state reference a dashed line (neither is a policy)."""
    policy_rows = [r for r in rows if r["policy"] != "steady_state"]
    cells = list(dict.fromkeys((r["workload"], r["replicas"]) for r in policy_rows))
    policies = list(dict.fromkeys(r["policy"] for r in policy_rows))
    by = {(r["workload"], r["replicas"], r["policy"]): r for r in rows}
    return {
        "title": "Mean step time (s); * a reference, not a --policy choice",
        "labels": [f"{w}, {n} replicas" for w, n in cells],
        "series": {
            marked(p): [by[(w, n, p)]["step_time_mean_s"] for w, n in cells] for p in policies
        },
        "bounds": {marked(p): [by[(w, n, p)]["lower_bound_s"] for w, n in cells] for p in policies},
        "reference": (
            "steady-state reference",
            [by[(w, n, "steady_state")]["step_time_mean_s"] for w, n in cells],
        ),
    }


def _what_if(
    args: argparse.Namespace, gpu: GpuModel, trainer: TrainerModel, sync: SyncModel, proxy: Any
) -> tuple[Any, str]:
    costs = Costs(args.replica_gpus, args.trainer_gpus, args.max_waste, args.max_slowdown)
    rows, pick = what_if(WORKLOADS[args.workload], gpu, trainer, sync, proxy,
                         max_replicas=args.max_replicas, quick=args.quick, costs=costs)  # fmt: skip
    text = report.table(
        ["replicas", "max_inflight_tasks", "mean_step_s", "bound_s", "wasted_share", "util"],
        [[r["replicas"], r["max_inflight_tasks"], r["step_time_mean_s"], r["lower_bound_s"],
          r["wasted_share"], r["utilization"]] for r in rows],
    )  # fmt: skip
    text += "\n" + lines(pick, costs)
    if args.plot:
        chart(args.plot / "fleet_what_if.png", rows, pick)
    results: dict[str, Any] = {"rows": rows, "recommended": pick}
    if args.share_runs:
        shape = dataclasses.replace(trainer, max_inflight=int(pick["max_inflight_tasks"]))
        separate = args.separate_replicas or int(pick["replicas"])
        layouts = grid({"given": shape}, WORKLOADS[args.workload], gpu, sync, proxy,
                       runs=(args.share_runs,), sizes=tuple(range(1, args.max_replicas + 1)),
                       quick=args.quick, separate=separate, trainer_gpus=args.trainer_gpus,
                       fit_loras=args.max_loras is None, progress=_progress)  # fmt: skip
        advice = recommend(layouts, args.share_runs)
        results["sharing"] = {"rows": layouts, "advice": advice}
        text += f"\n{sharing_table(layouts)}\n{advice['line']}"
    return results, text


def _elastic(
    args: argparse.Namespace, gpu: GpuModel, trainer: TrainerModel, sync: SyncModel, proxy: Any
) -> tuple[Any, str]:
    """The scaler against fixed fleets on changing lengths (``elastic_study.py``)."""
    results = elastic_study(gpu, trainer, sync, proxy, quick=args.quick, progress=_progress)
    text = report.table(
        ["shape", "run", "start", "in_flight", "wall_min", "gpu_s_per_step", "dollars",
         "wasted", "mean_replicas", "final"],
        [[r["shape"], r["label"], r["start_replicas"], r["max_inflight_tasks"], r["wall_min"],
          3600 * r["gpu_hours_per_step"], r["dollars"], r["wasted_share"], r["mean_replicas"],
          r["final_replicas"]] for r in results["rows"]],
    )  # fmt: skip
    text += "\n" + acceptance_lines(results["acceptance"])
    if args.plot:
        path = args.plot / "fleet_elastic.png"
        elastic_chart(path, results)
        text += f"\nchart: {path}"
    return results, text


def _sharing(
    args: argparse.Namespace, gpu: GpuModel, trainer: TrainerModel, sync: SyncModel, proxy: Any
) -> tuple[Any, str]:
    """K runs on one fleet against K separate fleets (``sharing.py``)."""
    configs = {"published": trainer}
    if args.shared_grid:
        configs["trainer_bound"] = dataclasses.replace(trainer, train_s=2 * trainer.train_s)
    runs = (args.runs,) if args.runs else (2, 4, 8)
    sizes = (args.shared_replicas,) if args.runs else tuple(range(1, args.max_replicas + 1))
    rows = grid(configs, WORKLOADS[args.workload], gpu, sync, proxy, runs=runs, sizes=sizes,
                quick=args.quick, separate=args.separate_replicas,
                trainer_gpus=args.trainer_gpus, fit_loras=args.max_loras is None,
                progress=_progress)  # fmt: skip
    return {"rows": rows}, sharing_table(rows) + "\n" + SHARING_LEGEND
