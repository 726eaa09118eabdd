"""Two TRL runs through one proxy on the tier's two real vLLM CPU servers, each at its own
``/runs/<run>`` URL (its trainer's relay in front of it), trained at the same time.

Both train to the end; each run's adapters reach every replica under their own names
(``<run>.trl-policy-vN``) and no bare TRL name ever does (two runs would collide on it); each
run's pause stays at its own relay (none reaches the fleet's proxy or a replica); every rollout
of both runs is answered 200, and run b's completions go on while the fleet carries out run a's
weight syncs (a's push into the proxy's receiver and its load, from the proxy's access log):
their latency there is reported against b's latency outside them.

The tier's servers hold ``max_loras`` 6 (``conftest.MAX_LORAS``): two runs of weight 1 get a
share of 3 each, so both run at ``--max-staleness 1`` (TRL checks ``max_staleness + 2``
against the share ``/runs/<run>/server_info`` reports).
"""

from __future__ import annotations

import re
import statistics
import sys
from datetime import datetime
from pathlib import Path

import pytest

from tests.e2e.conftest import MAX_LORAS
from tests.e2e.support import (
    REPLICA_TOKEN,
    VllmServer,
    adapters_listed,
    all_routable,
    events,
    get_json,
    get_text,
    metric_sum,
    report_perf,
    run_trainer,
    wait_or_kill,
)
from trainer_entry import sidecar

RUNS = ("a", "b")
STEPS = 3
STALENESS = 1
TRAIN_TIMEOUT_S = 900.0
_ACCESS = re.compile(
    r"\[proxy\] (?P<at>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) INFO proxy\.access: \S+ (?:PUT|POST) "
    r"/runs/(?P<run>[a-z0-9-]+)/(?P<path>\S+) (?P<status>\d+) \S+ (?P<ms>[0-9.]+) ms"
)


def _args(tiny: dict[str, Path], out: Path, url: str) -> list[str]:
    return [
        *("--model", str(tiny["model"]), "--dataset", str(tiny["data"])),
        *("--output-dir", str(out), "--max-steps", str(STEPS), "--proxy-url", url),
        *("--num-generations", "4", "--lora-rank", "1", "--weight-sync-steps", "1"),
        *("--max-staleness", str(STALENESS), "--max-completion-length", "16"),
        *("--learning-rate", "1e-4", "--gradient-accumulation-steps", "1"),
        *("--token-budget", "512"),
    ]


def _requests(proxy_log: str) -> list[tuple[str, str, int, float, float]]:
    """(run, path, status, start, end) of each request under /runs/ (the access log)."""
    out = []
    for m in _ACCESS.finditer(proxy_log):
        end = datetime.strptime(m["at"], "%Y-%m-%d %H:%M:%S,%f").timestamp()
        out.append((m["run"], m["path"], int(m["status"]), end - float(m["ms"]) / 1000, end))
    return out


def _sync_windows(
    requests: list[tuple[str, str, int, float, float]], run: str
) -> list[tuple[float, float]]:
    """The fleet's part of each of ``run``'s weight syncs: from its relay's push into the
    proxy's receiver (if any) to its load's answer."""
    windows, pushed = [], None
    for r, path, _, start, end in sorted(requests, key=lambda q: q[3]):
        if r != run:
            continue
        if path.startswith("rollout/adapters/"):
            pushed = start if pushed is None else pushed
        elif path == "v1/load_lora_adapter":
            windows.append((start if pushed is None else pushed, end))
            pushed = None
    return windows


def test_two_runs_train_on_one_fleet_each_under_its_own_names(
    clean_fleet: list[VllmServer],
    tiny: dict[str, Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    offsets = [s.log_path.stat().st_size for s in clean_fleet]
    argv = [
        *(sys.executable, "-m", "proxy", "--replica-urls", ",".join(s.url for s in clean_fleet)),
        *("--host", "127.0.0.1", "--port", str(sidecar.free_port()), "--runs", ",".join(RUNS)),
        *("--block-tokens", "32", "--template-threshold", "8", "--access-log"),
    ]
    with sidecar.running(argv, env={"PROXY_UPSTREAM_TOKEN": REPLICA_TOKEN}) as url:
        all_routable(url, len(clean_fleet))
        info = get_json(f"{url}/runs/a/server_info")
        assert info["vllm_config"]["lora_config"]["max_loras"] == MAX_LORAS // len(RUNS)
        trainers = {
            run: run_trainer(
                _args(tiny, tmp_path / run, f"{url}/runs/{run}"), tmp_path / f"{run}.log"
            )
            for run in RUNS
        }
        codes = {run: wait_or_kill(p, TRAIN_TIMEOUT_S) for run, p in trainers.items()}
        status = get_json(url + "/proxy/status")
        proxy_metrics = get_text(url + "/metrics")
    proxy_log = capsys.readouterr().out
    logs = {run: (tmp_path / f"{run}.log").read_text() for run in RUNS}
    for run in RUNS:
        assert codes[run] == 0, logs[run][-6000:]
        assert "training finished" in logs[run]
        assert logs[run].count("Weight sync: done") == STEPS + 1  # v1, then one per step
        assert "failed (" not in logs[run], "a rollout request was retried"

    # Each run's pause stays at its relay, which answers it (nothing to freeze); the fleet's
    # proxy and the replicas never see one.
    for run in RUNS:
        assert status["runs"][run]["pauses"] == 0, status["runs"]
        assert status["runs"][run]["requests"] > 0
        assert metric_sum(proxy_metrics, "rollout_proxy_run_requests_total", run=run) > 0
    synced = {run: {f"{run}.trl-policy-v{n}" for n in range(1, STEPS + 2)} for run in RUNS}
    for server, offset in zip(clean_fleet, offsets, strict=True):
        log_events = events(server.log_path.read_bytes()[offset:].decode(errors="replace"))
        loaded = {e.value for e in log_events if e.kind == "load"}
        unloaded = {e.value for e in log_events if e.kind == "unload"}
        # Every version of each run reached every replica under its own name, and nothing else
        # did: no bare TRL name (the collision), no name of a run that is not there.
        assert loaded == synced["a"] | synced["b"], (server.url, sorted(loaded))
        assert not [e for e in log_events if e.kind == "control"], "a pause reached a replica"
        # What is left: each run's window (TRL unloads what falls out of max_staleness + 1), and
        # what went is exactly what each run's own unloads named: neither run's load or share
        # retired a version of the other.
        window = {f"{run}.trl-policy-v{n}" for run in RUNS for n in range(STEPS + 1 - STALENESS,
                                                                            STEPS + 2)}  # fmt: skip
        assert set(adapters_listed(server.url)) == window, server.url
        assert unloaded == loaded - window, (server.url, sorted(unloaded))
        completions = [e for e in log_events if e.kind == "completion"]
        assert completions and {e.value for e in completions} == {"200"}, server.url

    # Run b's completions during run a's weight syncs, against b's others.
    requests = _requests(proxy_log)
    assert {status for _, path, status, _, _ in requests if "completions" in path} == {200}
    windows = _sync_windows(requests, "a")
    assert len(windows) == STEPS + 1, windows
    b_calls = [(start, end) for run, path, _, start, end in requests
               if run == "b" and path.endswith("completions")]  # fmt: skip

    def overlaps(start: float, end: float) -> bool:
        return any(start < w_end and end > w_start for w_start, w_end in windows)

    during = [end - start for start, end in b_calls if overlaps(start, end)]
    outside = [end - start for start, end in b_calls if not overlaps(start, end)]
    assert during, "no completion of run b overlapped run a's syncs: b stood still"
    spans = [round(w_end - w_start, 3) for w_start, w_end in windows]
    synced_s = sum(w_end - w_start for w_start, w_end in windows)
    ended = sum(1 for _, end in b_calls if any(w0 <= end <= w1 for w0, w1 in windows))
    b_span = max(end for _, end in b_calls) - min(start for start, _ in b_calls)
    print(f"\nrun a's syncs on the fleet (push and load, s): {spans}")
    print(
        f"run b's completions: {len(during)} overlapping a's syncs, median "
        f"{statistics.median(during):.3f} s; {len(outside)} outside them, median "
        f"{statistics.median(outside) if outside else float('nan'):.3f} s (a long completion "
        f"is likelier to overlap); answered {ended / synced_s:.1f}/s during a's syncs against "
        f"{len(b_calls) / b_span:.1f}/s over b's run"
    )
    print(f"runs on one fleet: {status['runs']}")
    for run in RUNS:
        report_perf(logs[run], f"run {run} of two on one fleet")
