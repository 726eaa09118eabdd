"""Adapter directories as TRL writes them (``replica_entry.sim.loopback``, shared with the
benchmarks), and as ``trainer_entry`` writes them: with the served-policy reference."""

from pathlib import Path

from adapter_receiver.reference import K, cuts_for, encode
from adapter_receiver.wire import PROBE_FILE
from replica_entry.sim.loopback import write_adapter
from replica_entry.sim.policy import content_policy, next_top
from replica_entry.sim.settings import SimSettings

__all__ = ["PROBE_IDS", "write_adapter", "write_version"]

PROBE_IDS = list(range(40, 72))  # a trainer's probe: a prompt of its own, as token ids


def write_version(directory: Path, n: int, *, reference: bool) -> Path:
    """``trl-policy-vN``; with ``reference``, carrying the probe's answer the trainer computed
    under the same weights (what an honest simulated replica answers)."""
    path = write_adapter(directory, f"trl-policy-v{n}")
    if reference:
        policy, vocab, cuts = (
            content_policy(path),
            SimSettings().vocab_size,
            cuts_for(len(PROBE_IDS)),
        )
        top = [[lp for _, lp in next_top(policy, PROBE_IDS[:cut], K, vocab)] for cut in cuts]
        (path / PROBE_FILE).write_bytes(encode(PROBE_IDS, cuts, top))
    return path
