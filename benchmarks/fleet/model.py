"""The constants of the fleet simulator, each a flag (``python -m benchmarks fleet --help``).

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


@dataclass(frozen=True, slots=True)
class GpuModel:
    """One replica: a vLLM engine on one GPU. Step time = ``step_s`` + ``prefill_token_s`` x
    prefill tokens + ``seq_s`` x sequences in the step + ``kv_token_s`` x context tokens read."""

    step_s: float = 0.0085
    prefill_token_s: float = 7.7e-6
    seq_s: float = 3.1e-5
    kv_token_s: float = 6.0e-9
    kv_blocks: int = 250_000
    block_size: int = 16
    max_num_batched_tokens: int = 8192
    max_num_seqs: int = 1024
    max_loras: int = 6

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

    every: int = 2  # weight_sync_steps
    pause_s: float = 0.3
    barrier_s: float = 0.0
    save_s: float = 1.1
    resume_s: float = 0.1
    unload_s: float = 0.0
    mode: str = field(default="mount", metadata={"choices": SYNC_MODES})
    mount_lag_s: float = 3.0
    retry_s: float = 0.25
    push_s: float = 1.0
    sync_s: float | None = None  # the whole sync, measured (overrides the model)
    frozen: bool = True  # the fleet stops generating while the sync runs

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

    group_size: int = 8
    groups_per_step: int = 16
    max_inflight: int = 384
    train_s: float = 3.5
    max_staleness: int = 4
    max_tokens: int = 2048
    tool_s: float = 0.0  # multi-turn: time between a turn's answer and the next request
    # TRL's rollout buffer (samples; its default 1024) and score queue (16 groups): with both
    # full the rollout worker starts nothing until the trainer consumes (backpressure).
    queue_maxsize: int = 1024


@dataclass(frozen=True, slots=True)
class ProxyModel:
    """The proxy in front of the fleet: its per-replica in-flight cap (excess waits in its
    queue) and how often it reads the replicas' /metrics."""

    per_replica_cap: int = 128
    scrape_s: float = 0.5
