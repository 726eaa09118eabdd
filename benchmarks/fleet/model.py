"""The constants of the fleet simulator, each a flag (``python -m benchmarks fleet --help``):
a field's ``metadata`` holds its help line (``help``), and where the flag is not the field's
name, the flag's name (``flag``) and its deprecated earlier one (``deprecated``).

Defaults: Qwen2.5-Math-1.5B (bf16) served by vLLM on one H200 per replica, TRL's
AsyncGRPOTrainer as in the published run
(https://huggingface.co/blog/asyncgrpo-lora-hfjobs). Where each figure comes from
is in README.md ("Calibration"); in short:
- ``kv_blocks``: (141 GB x 0.9 - 3.1 GB of weights - ~5 GB of activations) / 28,672 bytes of KV
  per token (28 layers x 2 KV heads x 128 dims x K and V x 2 bytes) / 16 tokens per block;
- ``kv_token_s``: 28,672 bytes per token read once per step at 4.8 TB/s;
- ``prefill_token_s``: 2 x 1.54e9 FLOPs per token at ~400 TFLOP/s achieved (40 % of peak);
- ``step_s`` and ``seq_s``: vLLM's per-step (scheduler, launch, sampler) and per-sequence
  (sampling with log-probabilities over a 151,936-token vocabulary, LoRA, output processing)
  costs, fitted so that the published configuration (3 replicas, 384 in flight) reproduces its
  published step time; a ~1.5B model's decode step is dominated by them, not by the GPU's
  arithmetic, which is why a third replica adds little at 128 requests in flight;
- ``max_num_batched_tokens`` 8192 and ``max_num_seqs`` 1024: vLLM's defaults for its API server
  on H100/H200 (``vllm/engine/arg_utils.py``, ``get_batch_defaults``); ``block_size`` 16.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any


def knob(default: Any, what: str, **more: Any) -> Any:
    """A field with its flag's help line (and ``choices``, ``flag``, ``deprecated``)."""
    return field(default=default, metadata={"help": what, **more})


@dataclass(frozen=True, slots=True)
class GpuModel:
    """One replica: a vLLM engine on one GPU. Step time = ``step_s`` + ``prefill_token_s`` x
    prefill tokens + ``seq_s`` x sequences in the step + ``kv_token_s`` x context tokens read."""

    step_s: float = knob(0.0085, "a step's fixed cost (scheduler, launch, sampler)")
    prefill_token_s: float = knob(7.7e-6, "time per prefilled (uncached) prompt token")
    seq_s: float = knob(3.1e-5, "time per sequence of a step (sampling, LoRA, output)")
    kv_token_s: float = knob(6.0e-9, "time per context token a step reads from the KV cache")
    kv_blocks: int = knob(250_000, "KV cache blocks of one replica")
    block_size: int = knob(16, "tokens per KV block")
    max_num_batched_tokens: int = knob(8192, "vLLM's token budget of one step")
    max_num_seqs: int = knob(1024, "vLLM's sequences of one step at most")
    max_loras: int = knob(6, "adapters a replica holds at once (vLLM's --max-loras)")

    def step_time(self, prefill: int, seqs: int, context: int) -> float:
        return (
            self.step_s
            + self.prefill_token_s * prefill
            + self.seq_s * seqs
            + self.kv_token_s * context
        )


SYNC_MODES = ("mount", "push")


@dataclass(frozen=True, slots=True)
class SyncModel:
    """A weight sync, in TRL's order (``_sync_weight_lora``): pause, barrier, save, load (a push
    and its load, or a load through the bucket mount), resume, unload of the oldest version.

    The trainer waits for the whole sync, always. The fleet stops generating for it only when
    ``frozen`` (a pause that freezes running requests, as vLLM's ``pause?mode=keep``); a proxy
    that answers TRL's pause and resume at once leaves requests flowing (``frozen=False``). The
    load takes ``push_s`` when pushing, else the slowest replica's mount lag (lag x U(0.8, 1.0)
    each, drawn per sync) rounded up to the load retry interval. ``sync_s``, when given, is the
    whole sync, measured (it overrides the phases). ``barrier_s`` is TRL's accelerator barriers
    (GPU-side: the ranks meet), ``unload_s`` the time until the unload is answered."""

    every: int = knob(2, "training steps between weight syncs (TRL's weight_sync_steps)")
    pause_s: float = knob(0.3, "TRL's pause of the replicas")
    barrier_s: float = knob(0.0, "the ranks' accelerator barriers")
    save_s: float = knob(1.1, "saving the adapter")
    resume_s: float = knob(0.1, "TRL's resume of the replicas")
    unload_s: float = knob(0.0, "until the oldest version's unload is answered")
    mode: str = knob("mount", "how a version reaches the replicas", choices=SYNC_MODES)
    mount_lag_s: float = knob(3.0, "mount: until a new adapter appears on a replica's mount")
    retry_s: float = knob(0.25, "mount: the load's retry interval")
    push_s: float = knob(1.0, "push: the push and its load")
    sync_s: float | None = knob(None, "the whole sync, measured (overrides the phases)")
    frozen: bool = knob(True, "whether the fleet stops generating while a sync runs")

    def __post_init__(self) -> None:
        if self.mode not in SYNC_MODES:
            raise ValueError(f"mode: expected one of {', '.join(SYNC_MODES)}, got {self.mode!r}")

    @property
    def fixed_s(self) -> float:
        """The phases that take the same time every sync (all but a mount's load)."""
        if self.sync_s is not None:
            return self.sync_s
        fixed = self.pause_s + self.barrier_s + self.save_s + self.resume_s + self.unload_s
        return fixed + (self.push_s if self.mode == "push" else 0.0)

    def draw(self, rng: random.Random, replicas: int) -> float:
        """One sync's duration; a mount's load draws each replica's lag from ``rng``."""
        if self.sync_s is not None or self.mode == "push":
            return self.fixed_s
        lags = [self.mount_lag_s * rng.uniform(0.8, 1.0) for _ in range(replicas)]
        return self.fixed_s + -(-max(lags) // self.retry_s) * self.retry_s

    def expected_s(self, replicas: int) -> float:
        """The mean of ``draw``: the slowest of N lags, each U(0.8, 1.0) x lag, rounded up to
        the retry interval (its distribution: P(max <= x) = ((x / lag - 0.8) / 0.2) ** N)."""
        if self.sync_s is not None or self.mode == "push":
            return self.fixed_s
        lag, step = self.mount_lag_s, self.retry_s

        def below(x: float) -> float:
            return min(max((x / lag - 0.8) / 0.2, 0.0), 1.0) ** replicas if lag > 0 else 1.0

        load, k = 0.0, 1
        while below((k - 1) * step) < 1.0:
            load += k * step * (below(k * step) - below((k - 1) * step))
            k += 1
        return self.fixed_s + load


@dataclass(frozen=True, slots=True)
class TrainerModel:
    """TRL's AsyncGRPOTrainer: groups of ``group_size`` rollouts of one prompt, at most
    ``max_inflight`` rollouts in flight, a step consumes ``groups_per_step`` groups and takes
    ``train_s`` of trainer time; samples more than ``max_staleness`` versions old are dropped."""

    group_size: int = knob(8, "rollouts per prompt (TRL's num_generations)")
    groups_per_step: int = knob(16, "groups a training step consumes")
    max_inflight: int = knob(
        384,
        "rollouts in flight at most (TRL's max_inflight_tasks, as rollout-trainer's flag)",
        flag="max_inflight_tasks",
        deprecated={
            "--max-inflight": "--max-inflight is the proxy's in-flight cap in rollout-proxy"
        },
    )
    train_s: float = knob(3.5, "trainer time of one step (measure it on your trainer)")
    max_staleness: int = knob(4, "versions a sample may lag before it is dropped")
    max_tokens: int = knob(2048, "completion tokens of a rollout at most")
    tool_s: float = knob(0.0, "multi-turn: between a turn's answer and the next request")
    # TRL's rollout buffer (samples; its default 1024) and score queue (16 groups): with both
    # full the rollout worker starts nothing until the trainer consumes (backpressure).
    queue_maxsize: int = knob(1024, "TRL's rollout buffer, in samples")


@dataclass(frozen=True, slots=True)
class ProxyModel:
    """The proxy in front of the fleet: its per-replica in-flight cap (excess waits in its
    queue) and how often it reads the replicas' /metrics."""

    per_replica_cap: int = knob(128, "the proxy's in-flight cap per replica")
    scrape_s: float = knob(0.5, "how often the proxy reads the replicas' /metrics")
