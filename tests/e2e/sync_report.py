"""Where a weight sync's time goes, as the user feels it: TRL's own phases (``perf/weight_sync_*``
in its log lines) beside the proxy's push and load of the same versions, and what the proxy
measured per replica. Printed (``make e2e`` shows what passed tests print) and returned.

TRL 1.16's ``_sync_weight_lora`` logs, per sync: ``weight_sync_s`` (the whole sync),
``weight_sync_pause_s`` (its ``/pause`` call), ``weight_sync_barrier_s`` (the ranks' barrier) and
``weight_sync_transfer_s`` (saving the adapter). What is left of ``weight_sync_s`` is the second
barrier, the load (through the proxy: push into every replica and vLLM's load there), ``/resume``,
the unload of the version that left the window and the deletion of an older directory. A log
line carries the mean of the syncs since the line before (the first covers v1, synced before the
first rollout, and v2)."""

from __future__ import annotations

import ast
import re
import statistics
from dataclasses import dataclass

from tests.e2e.support import metric_sum

PROXY_LOAD = re.compile(r"adapter (trl-policy-v\d+) loaded on \d+ replica\(s\) in ([0-9.]+) s")
_DONE = "Weight sync: done"
_LOGGED = re.compile(r"\{'[^{}]*'perf/weight_sync_s'[^{}]*\}")
_PHASES = ("sync_s", "sync_pause_s", "sync_barrier_s", "sync_transfer_s")  # perf/weight_...


@dataclass(frozen=True)
class SyncPhases:
    """One TRL log line's weight-sync figures (the mean of the syncs it covers)."""

    versions: tuple[str, ...]
    sync_s: float
    pause_s: float
    barrier_s: float
    save_s: float
    proxy_s: float | None  # the proxy's push + load of these versions (mean), when it logged it

    @property
    def rest_s(self) -> float:
        """Load (through the proxy), resume, unload and the second barrier."""
        return self.sync_s - self.pause_s - self.barrier_s - self.save_s


def sync_phases(trainer_log: str, first: int = 1) -> list[SyncPhases]:
    """TRL's phases per log line, in order, with the versions synced since the line before
    (numbered from ``first``: a resumed run goes on from its checkpoint's version)."""
    # The proxy's lines come through a pipe and may land after TRL's line for the same sync.
    proxy = {name: float(seconds) for name, seconds in PROXY_LOAD.findall(trainer_log)}
    pending: list[str] = []
    done = first - 1
    rows = []
    for match in re.finditer(rf"(?P<done>{_DONE})|(?P<logged>{_LOGGED.pattern})", trainer_log):
        if match["done"]:
            done += 1
            pending.append(f"trl-policy-v{done}")
        elif pending:
            logged = ast.literal_eval(match["logged"])
            sync, pause, barrier, save = (float(logged[f"perf/weight_{p}"]) for p in _PHASES)
            loads = [proxy[name] for name in pending if name in proxy]
            mean = statistics.fmean(loads) if loads else None
            rows.append(SyncPhases(tuple(pending), sync, pause, barrier, save, mean))
            pending = []
    return rows


def report_sync_phases(
    trainer_log: str, proxy_metrics: str, title: str, first: int = 1
) -> list[SyncPhases]:
    rows = sync_phases(trainer_log, first)
    print(f"\nTRL's weight sync by phase ({title}), seconds:")
    print("  versions        sync   pause  barrier   save   rest   proxy: push + load")
    for row in rows:
        shown = "-" if row.proxy_s is None else f"{row.proxy_s:.3f}"
        names = "+".join(name.removeprefix("trl-policy-") for name in row.versions)
        print(f"  {names:<12} {row.sync_s:6.3f}  {row.pause_s:6.3f}  {row.barrier_s:6.3f}  "
              f"{row.save_s:6.3f}  {row.rest_s:6.3f}   {shown}")  # fmt: skip
    if rows:
        print(f"  median sync {statistics.median(r.sync_s for r in rows):.3f} s, "
              f"pause {statistics.median(r.pause_s for r in rows):.3f} s")  # fmt: skip
    for family, what in (("push", "push into its receiver"), ("load", "vLLM's load")):
        name = f"rollout_proxy_adapter_{family}_seconds"
        for replica in sorted(set(re.findall(rf'{name}_count\{{replica="([^"]+)"', proxy_metrics))):
            count = metric_sum(proxy_metrics, f"{name}_count", replica=replica)
            total = metric_sum(proxy_metrics, f"{name}_sum", replica=replica)
            if count:
                print(f"  proxy, {replica}: {what} {total / count:.3f} s mean over {count:.0f}")
    return rows
