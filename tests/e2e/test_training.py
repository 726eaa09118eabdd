"""TRL's AsyncGRPOTrainer trains a LoRA through the proxy against two real vLLM CPU servers.
TRL saves adapters into one shared directory (the bucket mount's stand-in); the proxy pushes
each version into every replica's adapter receiver (inside vLLM) and loads it from there."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.e2e.conftest import MAX_STALENESS
from tests.e2e.faults import (
    frozen,
    kill_proxies_during_a_sync,
    newest,
    published,
    routable,
    wait_for,
)
from tests.e2e.support import (
    REPLICA_TOKEN,
    Event,
    VllmServer,
    adapters_listed,
    events,
    get_json,
    get_text,
    loaded_from,
    metric_sum,
    report_perf,
    run_trainer,
    versions,
    wait_or_kill,
)
from tests.e2e.sync_report import PROXY_LOAD, report_sync_phases
from trainer_entry import sidecar

# The CPU build's KV block is 32 tokens; a group has 4 rollouts, so a block followed by more
# than 8 different blocks is template (the shared system prompt), not a problem.
PROXY_ARGS = ("--block-tokens", "32", "--template-threshold", "8")
TRAIN_TIMEOUT_S = 420.0
# A proxy this test starts sends the replicas' token, from its environment.
UPSTREAM = {"PROXY_UPSTREAM_TOKEN": REPLICA_TOKEN}


def _roots(server: VllmServer) -> dict[str, str]:
    """Adapter name -> the path the replica itself shows for it (``/v1/models`` root)."""
    return {card["id"]: card["root"] for card in get_json(server.url + "/v1/models")["data"][1:]}


def _trainer_args(tiny: dict[str, Path], out: Path, steps: int) -> list[str]:
    return [
        *("--model", str(tiny["model"]), "--dataset", str(tiny["data"])),
        *("--output-dir", str(out), "--max-steps", str(steps)),
        *("--num-generations", "4", "--lora-rank", "1", "--weight-sync-steps", "1"),
        *("--max-staleness", str(MAX_STALENESS), "--max-completion-length", "32"),
        *("--learning-rate", "1e-4", "--gradient-accumulation-steps", "1"),
        # The recipe packs 16,384 tokens per micro-batch; these servers hold 512 per sequence.
        *("--token-budget", "512"),
    ]


@contextmanager
def _proxy(fleet: list[VllmServer], out: Path) -> Iterator[str]:
    adapters = out / ".vllm_lora"
    adapters.mkdir(parents=True)
    argv = sidecar.sidecar_command(
        [s.url for s in fleet], sidecar.free_port(), adapters, PROXY_ARGS
    )
    with sidecar.running(argv, env=UPSTREAM) as url:
        yield url


def _synced(trainer_log: str) -> list[str]:
    count = trainer_log.count("Weight sync: done")
    return [f"trl-policy-v{n}" for n in range(1, count + 1)]


def _completions(log_events: list[Event]) -> list[Event]:
    return [e for e in log_events if e.kind == "completion"]


_TRANSFER = re.compile(r"Weight sync: resuming vLLM\.\.\. \(transfer took ([0-9.]+)s\)")
_TOTAL = re.compile(r"Weight sync: done\. Total ([0-9.]+)s")


@dataclass(frozen=True)
class SyncTime:
    version: str
    trl_save_s: float  # TRL's "transfer": saving the adapter (its load call comes after)
    trl_sync_s: float  # TRL's whole sync: pause, save, load (through the proxy), resume, unload
    proxy_load_s: float | None  # the proxy's: TRL's load request to every replica loaded


def report_sync_times(trainer_log: str, title: str) -> list[SyncTime]:
    """The sync time of every step, from TRL's log lines and the proxy's; printed (``make e2e``
    shows the output of passed tests) and returned."""
    proxy = {name: float(seconds) for name, seconds in PROXY_LOAD.findall(trainer_log)}
    pairs = zip(_TRANSFER.findall(trainer_log), _TOTAL.findall(trainer_log), strict=False)
    rows = [
        SyncTime(f"trl-policy-v{n}", float(save), float(total), proxy.get(f"trl-policy-v{n}"))
        for n, (save, total) in enumerate(pairs, 1)
    ]
    print(f"\nsync time per step ({title}):")
    print("  version             TRL save   TRL sync   proxy: push + vLLM load")
    for row in rows:
        shown = "-" if row.proxy_load_s is None else f"{row.proxy_load_s:.3f} s"
        print(f"  {row.version:<16} {row.trl_save_s:>11.1f} s {row.trl_sync_s:>8.1f} s   {shown}")
    return rows


def assert_pushed(server: VllmServer, log_text: str, names: list[str]) -> None:
    """Every version in ``names`` was loaded on ``server`` from its receiver's store, never from
    the shared directory (a replica's mount)."""
    paths = loaded_from(log_text)
    for name in names:
        assert paths.get(name), (server.url, name, sorted(paths))
        assert all(server.stored(path) for path in paths[name]), (server.url, name, paths[name])


def test_training_syncs_every_version_to_both_replicas_and_routes_groups_together(
    clean_fleet: list[VllmServer], tiny: dict[str, Path], tmp_path: Path
) -> None:
    out = tmp_path / "run"
    offsets = [s.log_path.stat().st_size for s in clean_fleet]
    hits_before = sum(
        metric_sum(get_text(s.url + "/metrics"), "vllm:prefix_cache_hits_total")
        for s in clean_fleet
    )
    with _proxy(clean_fleet, out) as url:
        trainer = run_trainer(
            [*_trainer_args(tiny, out, steps=8), "--proxy-url", url], tmp_path / "trainer.log"
        )
        code = wait_or_kill(trainer, TRAIN_TIMEOUT_S)
        trainer_log = (tmp_path / "trainer.log").read_text()
        assert code == 0, trainer_log[-6000:]
        proxy_metrics = get_text(url + "/metrics")
        policy = get_json(url + "/proxy/status")["adapters"]["policy"]
    assert "training finished" in trainer_log
    assert "CPU shim applied" in trainer_log
    # The proxy's figures ride in TRL's own log lines (and so in any --report-to tracker).
    assert "'proxy/replicas_routable': 2.0" in trainer_log, trainer_log[-3000:]
    assert "'proxy/cache_hit_ratio'" in trainer_log

    synced = _synced(trainer_log)
    assert len(synced) == 9  # v1 before the first rollout, then one per step
    rows = report_sync_times(trainer_log, "push, 2 replicas")
    assert report_perf(trainer_log, "1 rank on CPU, 2 replicas")["perf/step_s"] > 0
    assert [r.version for r in rows] == synced
    phases = report_sync_phases(trainer_log, proxy_metrics, "push, 2 replicas generating")
    assert [v for row in phases for v in row.versions] == synced
    # The fleet never stood still: the trainer's relay answered each pause and resume itself
    # (this proxy saw none), none reached a replica (below); TRL's log shows a paused share 0.
    assert metric_sum(proxy_metrics, "rollout_proxy_sync_window_seconds_count") == 0
    assert metric_sum(proxy_metrics, "rollout_proxy_paused_seconds_total") == 0
    shares = re.findall(r"'proxy/paused_share': '([0-9.]+)'", trainer_log)
    assert shares and {float(share) for share in shares} == {0.0}, shares
    assert metric_sum(proxy_metrics, "rollout_proxy_sync_paused_seconds_count") == 0
    # Every version reached every replica by push: no replica fell back to the mount.
    assert metric_sum(proxy_metrics, "rollout_proxy_adapter_push_fallbacks_total") == 0
    window = set(synced[-(MAX_STALENESS + 1) :])
    for server, offset in zip(clean_fleet, offsets, strict=True):
        replica_log = server.log_path.read_bytes()[offset:].decode(errors="replace")
        assert_pushed(server, replica_log, synced)
        assert all(server.stored(root) for root in _roots(server).values())
        log_events = events(replica_log)
        loaded = {e.value for e in log_events if e.kind == "load"}
        unloaded = {e.value for e in log_events if e.kind == "unload"}
        assert set(synced) <= loaded, (server.url, versions(loaded))
        assert set(synced) - window <= unloaded, (server.url, versions(unloaded))
        assert set(adapters_listed(server.url)) == window
        assert not [e for e in log_events if e.kind == "control"], server.url
        completions = _completions(log_events)
        assert completions, f"{server.url} got no rollout"
        # vLLM answers a request for an adapter it has not loaded with 404: every rollout
        # answered 200, so none was sent a version before its load there had answered.
        assert {e.value for e in completions} == {"200"}, "a rollout failed on " + server.url

    total = metric_sum(proxy_metrics, "rollout_proxy_requests_total", route="completions")
    assert total == metric_sum(
        proxy_metrics, "rollout_proxy_requests_total", route="completions", status="200"
    )
    per_replica = [
        metric_sum(
            proxy_metrics, "rollout_proxy_replica_requests_total", replica=f"127.0.0.1:{s.port}"
        )
        for s in clean_fleet
    ]
    assert all(n > 0 for n in per_replica), per_replica
    # A group's rollouts share a key, and a key's placement is deterministic: affinity (or the
    # sticky memory of a spill) keeps them together; only spills and unkeyed requests may not.
    together = sum(
        metric_sum(proxy_metrics, "rollout_proxy_routing_decisions_total", reason=reason)
        for reason in ("affinity", "sticky")
    )
    assert together >= 0.9 * total, proxy_metrics
    assert metric_sum(proxy_metrics, "rollout_proxy_tokens_total", kind="cached") > 0
    hits_after = sum(
        metric_sum(get_text(s.url + "/metrics"), "vllm:prefix_cache_hits_total")
        for s in clean_fleet
    )
    assert hits_after > hits_before
    assert "failed (" not in trainer_log, "a rollout request was retried"
    # Every replica served every version as the trainer computed it: each version carried the
    # trainer's reference, and each replica's answer to the probe was within the tolerance.
    assert_served_as_trained(policy, proxy_metrics, synced, replicas=len(clean_fleet))


def assert_served_as_trained(
    policy: dict[str, Any], metrics: str, synced: list[str], replicas: int
) -> None:
    """Each version in ``synced`` was probed on every replica against the trainer's reference
    and passed; what the probes cost is printed."""
    assert not policy["alarm"] and not any(policy["mismatches"].values()), policy
    states = {entry["state"] for held in policy["replicas"].values() for entry in held.values()}
    assert states == {"ok"}, policy
    probes = metric_sum(metrics, "rollout_proxy_probe_seconds_count")
    waits = metric_sum(metrics, "rollout_proxy_policy_wait_seconds_count")
    assert waits == replicas * len(synced), (waits, synced)
    assert probes >= waits
    probe_s = metric_sum(metrics, "rollout_proxy_probe_seconds_sum") / probes
    wait_s = metric_sum(metrics, "rollout_proxy_policy_wait_seconds_sum") / waits
    print(f"served-policy probe: {int(probes)} probes, {probe_s * 1000:.0f} ms mean; a "
          f"version's first requests on a replica waited {wait_s * 1000:.0f} ms mean")  # fmt: skip


def test_a_remote_proxy_behind_a_token_is_reached_through_the_local_relay(
    clean_fleet: list[VllmServer], tiny: dict[str, Path], tmp_path: Path
) -> None:
    """The relay pushes each version into the remote proxy, which pushes it on to the replicas
    (as a proxy job without the trainer's files would have to)."""
    out = tmp_path / "run"
    offsets = [s.log_path.stat().st_size for s in clean_fleet]
    adapters = out / ".vllm_lora"
    adapters.mkdir(parents=True)
    argv = sidecar.sidecar_command(
        [s.url for s in clean_fleet], sidecar.free_port(), adapters, PROXY_ARGS
    )
    with sidecar.running(argv, env={"PROXY_API_KEY": "relay-secret", **UPSTREAM}) as remote:
        relay = ["--proxy-url", remote, "--proxy-token-env", "E2E_PROXY_TOKEN"]
        trainer = run_trainer(
            [*_trainer_args(tiny, out, steps=2), *relay],
            tmp_path / "trainer.log",
            env={"E2E_PROXY_TOKEN": "relay-secret"},
        )
        code = wait_or_kill(trainer, TRAIN_TIMEOUT_S)
        trainer_log = (tmp_path / "trainer.log").read_text()
        assert code == 0, trainer_log[-6000:]
    assert "starting a local relay" in trainer_log
    assert "training finished" in trainer_log
    assert "relay-secret" not in trainer_log
    report_sync_times(trainer_log, "relay -> remote proxy -> 2 replicas, push")
    synced = _synced(trainer_log)
    assert synced
    for server, offset in zip(clean_fleet, offsets, strict=True):
        assert_pushed(
            server, server.log_path.read_bytes()[offset:].decode(errors="replace"), synced
        )


def test_a_replica_killed_mid_training_comes_back_with_the_window_before_traffic(
    clean_fleet: list[VllmServer], tiny: dict[str, Path], tmp_path: Path
) -> None:
    out = tmp_path / "run"
    victim = clean_fleet[1]
    with _proxy(clean_fleet, out) as url:
        trainer = run_trainer(
            [*_trainer_args(tiny, out, steps=16), "--proxy-url", url], tmp_path / "trainer.log"
        )
        try:
            wait_for(lambda: len(versions(published(out))) >= 3 or trainer.poll() is not None)
            assert trainer.poll() is None, (tmp_path / "trainer.log").read_text()[-6000:]
            victim.kill()
            wait_for(lambda: routable(url, victim) is False)
            # Training carries on with one replica: a version is trained and synced meanwhile.
            at_kill = newest(out)
            wait_for(lambda: newest(out) > at_kill or trainer.poll() is not None)
            assert trainer.poll() is None, (tmp_path / "trainer.log").read_text()[-6000:]
            # On a GPU a training run outlasts a vLLM restart many times over; on two CPU cores
            # the restart competes with the trainer and may outlast it. Freezing the trainer while
            # vLLM starts keeps the restart inside the run, and nothing is lost: its requests wait.
            with frozen(trainer):
                victim.start()
                victim.wait_ready()
                newest_at_ready = newest(out)
                wait_for(lambda: routable(url, victim) is True)
            wait_for(lambda: bool(_completions(events(victim.log_since_start()))))
            # The proxy and the trainer's relay are killed (SIGKILL) while a sync's load is in
            # flight through both; their supervisors bring them back on the same sockets, TRL's
            # reset call is sent again (trainer_entry.sync_retry) and training carries on.
            killed_after = kill_proxies_during_a_sync(
                url, trainer, tmp_path / "trainer.log", clean_fleet[0]
            )
        finally:
            code = wait_or_kill(trainer, TRAIN_TIMEOUT_S)
        trainer_log = (tmp_path / "trainer.log").read_text()
        assert code == 0, trainer_log[-6000:]
        assert get_json(url + "/proxy/status")["restarts"] == 1
    assert "training finished" in trainer_log
    synced = _synced(trainer_log)
    after_kill = synced[killed_after:]
    assert after_kill, "no version was synced after the proxy came back"
    for server in clean_fleet:  # every version synced since the restart reached every replica
        loaded = {e.value for e in events(server.log_since_start()) if e.kind == "load"}
        assert set(after_kill) <= loaded, (server.url, after_kill, sorted(loaded))

    restarted = events(victim.log_since_start())
    first = next(i for i, e in enumerate(restarted) if e.kind == "completion")
    before = {e.value for e in restarted[:first] if e.kind == "load"}
    assert f"trl-policy-v{newest_at_ready}" in before, (newest_at_ready, versions(before))
    assert len(before) >= min(newest_at_ready, MAX_STALENESS + 1), versions(before)
    assert {e.value for e in _completions(restarted)} == {"200"}
    # The window went into the restarted replica's (emptied) receiver by push, as did every
    # version after it.
    assert_pushed(victim, victim.log_since_start(), sorted(before))
    report_sync_times(trainer_log, "push, a replica restarted and the proxy killed once")
