"""The trainer on several ranks: FSDP2 over gloo (the GPU path's structure on CPU), sharded
checkpoints, a SIGKILL mid-run that leaves nothing behind, an exact resume by the same command,
and two "nodes" of one rank each meeting at torch's rendezvous on loopback.

What only a GPU can prove: NCCL collectives, bf16 mixed precision, the FA3 kernel TRL packs with
(the CPU shim computes the same contract with SDPA), and the memory a token budget takes.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import threading
import time
from pathlib import Path

from adapter_receiver.reference import decode
from adapter_receiver.wire import PROBE_FILE
from tests.e2e.support import (
    REPLICA_TOKEN,
    VllmServer,
    events,
    report_perf,
    run_trainer,
    wait_or_kill,
)
from tests.e2e.sync_report import report_sync_phases
from trainer_entry import checkpoints
from trainer_entry.sidecar import free_port

TRAIN_TIMEOUT_S = 480.0
PROXY_ARGS = ("--proxy-arg=--block-tokens", "--proxy-arg=32", "--proxy-arg=--template-threshold",
              "--proxy-arg=8")  # fmt: skip
_LOADED = re.compile(r"adapter (trl-policy-v\d+) loaded on (\d+) replica")


def _args(tiny: dict[str, Path], out: Path, steps: int, *extra: str) -> list[str]:
    return [
        *("--model", str(tiny["model"]), "--dataset", str(tiny["data"])),
        *("--output-dir", str(out), "--max-steps", str(steps)),
        *("--num-generations", "4", "--weight-sync-steps", "1", "--max-staleness", "2"),
        *("--max-completion-length", "32", "--learning-rate", "1e-3"),
        *("--gradient-accumulation-steps", "1", "--token-budget", "256"),
        *("--rewards", "tests.e2e.rewards:length_reward"),
        *extra,
    ]


def _descendants(root: int) -> set[int]:
    """Every live process whose ancestry leads to ``root`` (new sessions included)."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_bytes()
            except OSError:
                continue
            parents[int(entry.name)] = int(stat.rsplit(b")", 1)[1].split()[1])
    found = set()
    for pid in parents:
        seen, up = 0, parents.get(pid)
        while up and seen < 64:
            if up == root:
                found.add(pid)
                break
            up, seen = parents.get(up), seen + 1
    return found


def _running(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return False
    return stat.rsplit(b")", 1)[1].split()[0] != b"Z"


def _port_free(port: int) -> bool:
    """No one listens there (a bind may still meet the old connections' TIME_WAIT, which the
    proxy's own listener, with SO_REUSEADDR as every server's, does not mind)."""
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
            probe.listen(1)
        except OSError:
            return False
    return True


def _wait_for(condition: object, timeout_s: float, what: str) -> None:
    assert callable(condition)
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"{what}: not within {timeout_s:.0f} s"
        time.sleep(0.2)


def _published(out: Path) -> set[int]:
    lora = out / checkpoints.LORA_DIR
    names = [p.name for p in lora.iterdir()] if lora.is_dir() else []
    return {int(n.rsplit("-v", 1)[1]) for n in names if re.fullmatch(r"trl-policy-v\d+", n)}


def _keep_when_published(path: Path, keep: Path) -> threading.Thread:
    """Hard-link ``path`` to ``keep`` as soon as a new file is published there (TRL renames a
    whole folder into place, so a file seen is complete); a file there already (the dead run's)
    is not the one awaited."""
    old = path.stat().st_ino if path.exists() else None

    def watch() -> None:
        deadline, gone = time.monotonic() + TRAIN_TIMEOUT_S, old is None
        while time.monotonic() < deadline:
            try:
                if gone or path.stat().st_ino != old:  # a freed inode may be reused: gone counts
                    os.link(path, keep)
                    return
            except FileNotFoundError:
                gone = True
            time.sleep(0.02)

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    return thread


def _full_state(checkpoint: Path, scratch: Path) -> dict[str, object]:
    """The adapter tensors of a sharded checkpoint, every rank's shard gathered."""
    import torch
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

    dcp_to_torch_save(checkpoint / "pytorch_model_fsdp_0", scratch)
    state = torch.load(scratch, weights_only=True)
    model: dict[str, object] = state["model"]
    return model


def test_two_fsdp2_ranks_train_checkpoint_die_whole_and_resume_exactly(
    clean_fleet: list[VllmServer], tiny: dict[str, Path], tmp_path: Path
) -> None:
    import torch
    from safetensors.torch import load_file

    out, port = tmp_path / "run", free_port()
    replicas = ",".join(s.url for s in clean_fleet)
    where = ("--sidecar-replicas", replicas, "--sidecar-port", str(port), *PROXY_ARGS)
    argv = _args(tiny, out, 4, "--num-processes", "2", "--save-steps", "2", *where)
    # As on HF Jobs: the replicas demand a bearer token and the trainer has HF_TOKEN as its only
    # secret; the sidecar sends it (from its environment, never its command line).
    assert "PROXY_UPSTREAM_TOKEN" not in os.environ
    env = {"HF_TOKEN": REPLICA_TOKEN}
    first = run_trainer(argv, tmp_path / "first.log", env=env)
    try:
        # Past a complete checkpoint, and past the next version the dead run publishes: the
        # resumed run must publish that name again, with the checkpoint's weights.
        def ready() -> bool:
            done = checkpoints.newest_complete(out)
            return first.poll() is not None or (
                done is not None
                and max(_published(out), default=0) > checkpoints.model_version(done)
            )

        _wait_for(ready, TRAIN_TIMEOUT_S, "a checkpoint and a version past it")
        assert first.poll() is None, (tmp_path / "first.log").read_text()[-6000:]
        family = _descendants(first.pid)
        assert len(family) >= 5, family  # supervisor + proxy, rank launcher, 2 ranks, worker
        first.send_signal(signal.SIGKILL)  # one process: as an OOM kill or a job's end does
        first.wait(30)
        gone = lambda: not any(_running(p) for p in family)  # noqa: E731
        _wait_for(gone, 10, "the trainer's children dying")
    finally:
        if first.poll() is None:
            os.killpg(first.pid, signal.SIGKILL)
    first_log = (tmp_path / "first.log").read_text()
    assert _port_free(port), "the dead trainer's proxy still holds its port"
    resumed_from = checkpoints.newest_complete(out)
    assert resumed_from is not None
    version = checkpoints.model_version(resumed_from)
    assert version + 1 in _published(out)  # the dead run had published the next name
    assert "rank 1 of 2: DistributedType.FSDP" in first_log
    assert "accelerate FSDP2 over gloo" in first_log
    shards = sorted(p.name for p in (resumed_from / "pytorch_model_fsdp_0").glob("*.distcp"))
    assert shards == ["__0_0.distcp", "__1_0.distcp"], shards  # SHARDED_STATE_DICT: every rank

    offsets = [s.log_path.stat().st_size for s in clean_fleet]
    # TRL prunes a version's folder a few syncs later: keep the resumed run's first adapter.
    first_adapter = out / checkpoints.LORA_DIR / f"trl-policy-v{version + 1}"
    kept = _keep_when_published(first_adapter / "adapter_model.safetensors", tmp_path / "kept")
    second = run_trainer(argv, tmp_path / "second.log", env=env)  # the same command
    code = wait_or_kill(second, TRAIN_TIMEOUT_S)
    kept.join(10)
    second_log = (tmp_path / "second.log").read_text()
    assert code == 0, second_log[-6000:]
    assert f"resume point: {resumed_from}" in second_log
    assert re.search(r"\[proxy\] proxy ready on http://127\.0\.0\.1:\d+", second_log)
    assert "sends the bearer token from $HF_TOKEN to the replicas" in second_log
    assert "training finished" in second_log
    assert REPLICA_TOKEN not in first_log + second_log
    perf = report_perf(first_log + second_log, "2 FSDP2 ranks on CPU, 2 replicas")
    assert perf["perf/step_s"] > 0
    phases = report_sync_phases(second_log, "", "2 FSDP2 ranks, resumed", first=version + 1)
    # Each version TRL's log counts is one the proxy says it loaded (its own log lines).
    assert phases and all(row.proxy_s is not None for row in phases), phases
    # The step count continues: one history from step 1 to 4, and the resumed run synced once
    # before its first step and once a step after the checkpoint's.
    step = checkpoints.step_of(resumed_from) or 0
    state = json.loads((out / "checkpoint-4" / "trainer_state.json").read_text())
    assert [h["step"] for h in state["log_history"] if "loss" in h] == [1, 2, 3, 4]
    assert second_log.count("Weight sync: done") == 1 + 4 - step
    loads = _LOADED.findall(second_log)
    assert loads and loads[0] == (f"trl-policy-v{version + 1}", "2"), loads[:3]
    synced = [name for name, _ in loads]
    for server, offset in zip(clean_fleet, offsets, strict=True):
        loaded = {e.value for e in events(server.log_path.read_bytes()[offset:].decode())
                  if e.kind == "load"}  # fmt: skip
        assert set(synced) <= loaded, (server.url, synced, sorted(loaded))
        assert '"POST /v1/completions HTTP/1.1" 200' in server.log_since_start()

    # The adapter published right after the resume is the checkpoint's, tensor for tensor, on
    # every shard: FSDP2 shards dim 0, and each half of every trained lora_B left zero.
    assert (tmp_path / "kept").exists(), "the resumed run's first adapter was never seen"
    published = load_file(tmp_path / "kept")
    saved = _full_state(resumed_from, tmp_path / "checkpoint.pt")
    assert set(published) == set(saved)
    for name, tensor in published.items():
        assert torch.equal(tensor, saved[name]), name
    trained = [t for n, t in published.items() if "lora_B" in n and t.shape[0] >= 2]
    assert trained
    for tensor in trained:
        half = tensor.shape[0] // 2
        assert tensor[:half].abs().sum() > 0 and tensor[half:].abs().sum() > 0
    # Every version carried the reference both ranks computed (a collective forward under
    # FSDP2), and every replica served each one as they computed it.
    assert decode((out / "final_adapter" / PROBE_FILE).read_bytes()).top
    served = re.findall(r"serves (trl-policy-v\d+) as the trainer computed it", second_log)
    assert all(served.count(name) >= len(clean_fleet) for name in synced), (served, synced)
    assert "does not serve" not in first_log + second_log
    record = json.loads((out / "final_adapter" / "rollout_run.json").read_text())
    assert record["steps"] == 4 and record["world_size"] == 2
    assert record["last_version"] == synced[-1]


def test_two_nodes_of_one_rank_meet_at_the_rendezvous(
    clean_fleet: list[VllmServer], tiny: dict[str, Path], tmp_path: Path
) -> None:
    out, master = tmp_path / "run", free_port()
    replicas = ",".join(s.url for s in clean_fleet)
    common = _args(tiny, out, 1, "--num-processes", "1", "--nnodes", "2", "--master-port",
                   str(master), "--sidecar-replicas", replicas, *PROXY_ARGS)  # fmt: skip
    env = {"HF_TOKEN": REPLICA_TOKEN}
    nodes = [
        run_trainer([*common, "--node-rank", str(rank)], tmp_path / f"node{rank}.log", env=env)
        for rank in (0, 1)
    ]
    codes = []
    try:
        codes = [wait_or_kill(node, TRAIN_TIMEOUT_S) for node in nodes]
    finally:
        for node in nodes:
            if node.poll() is None:
                os.killpg(node.pid, signal.SIGKILL)
    logs = [(tmp_path / f"node{rank}.log").read_text() for rank in (0, 1)]
    assert codes == [0, 0], [text[-4000:] for text in logs]
    assert "rank 0 of 2: DistributedType.FSDP" in logs[0]
    assert "rank 1 of 2: DistributedType.FSDP" in logs[1]
    assert "on node 1 of 2, 2 in the run" in logs[1]
    assert "training finished" in logs[0]
    # Node 0 alone runs the proxy side and the rollout worker.
    assert "proxy ready on" in logs[0] and "proxy ready on" not in logs[1]
    assert "AsyncRolloutWorker spawned" in logs[0] and "AsyncRolloutWorker" not in logs[1]
