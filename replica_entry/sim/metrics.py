"""Prometheus metrics of one simulated replica, under vLLM's names, in the app's own registry.

Counters are bumped by the simulator as tokens flow; gauges and the LoRA info series are read
from a snapshot of the engine at scrape time (``refresh``), so the hot path never touches
them. Every series carries ``engine="0"`` and ``model_name=<served model>``, as vLLM's do.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest

_LABELS = ("model_name", "engine")


@dataclass(frozen=True, slots=True)
class EngineSnapshot:
    running: int
    waiting: int
    running_loras: Iterable[str]
    max_loras: int
    kv_usage: float


class SimMetrics:
    def __init__(self, model: str) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        labels = {"model_name": model, "engine": "0"}
        r = self.registry
        self._prompt_tokens = Counter(
            "vllm:prompt_tokens", "Prefill tokens processed.", _LABELS, registry=r
        ).labels(**labels)
        self._generation_tokens = Counter(
            "vllm:generation_tokens", "Generation tokens processed.", _LABELS, registry=r
        ).labels(**labels)
        self._cache_queries = Counter(
            "vllm:prefix_cache_queries", "Prefix cache queries, in tokens.", _LABELS, registry=r
        ).labels(**labels)
        self._cache_hits = Counter(
            "vllm:prefix_cache_hits", "Prefix cache hits, in tokens.", _LABELS, registry=r
        ).labels(**labels)
        self._running = Gauge(
            "vllm:num_requests_running", "Requests in model execution.", _LABELS, registry=r
        ).labels(**labels)
        self._waiting = Gauge(
            "vllm:num_requests_waiting", "Requests waiting to be processed.", _LABELS, registry=r
        ).labels(**labels)
        self._kv_usage = Gauge(
            "vllm:kv_cache_usage_perc",
            "KV-cache usage. 1 means 100 percent usage.",
            _LABELS,
            registry=r,
        ).labels(**labels)
        # The simulation never preempts (it admits a request only when it fits): always 0.
        Counter(
            "vllm:num_preemptions", "Cumulative number of preemptions.", _LABELS, registry=r
        ).labels(**labels)
        self._lora_info = Gauge(
            "vllm:lora_requests_info",
            "Running stats on LoRA requests.",
            ("max_lora", "running_lora_adapters", "waiting_lora_adapters", *_LABELS),
            registry=r,
        )
        self._labels = labels

    def record_prefill(self, prompt_tokens: int, cached_tokens: int) -> None:
        self._prompt_tokens.inc(prompt_tokens)
        self._cache_queries.inc(prompt_tokens)
        self._cache_hits.inc(cached_tokens)

    def record_generated(self, tokens: int) -> None:
        self._generation_tokens.inc(tokens)

    def refresh(self, snapshot: EngineSnapshot) -> None:
        """Bring the gauges up to date before a scrape."""
        self._running.set(snapshot.running)
        self._waiting.set(snapshot.waiting)
        self._kv_usage.set(snapshot.kv_usage)
        self._lora_info.clear()
        self._lora_info.labels(
            max_lora=str(snapshot.max_loras),
            running_lora_adapters=",".join(sorted(snapshot.running_loras)),
            waiting_lora_adapters="",
            **self._labels,
        ).set(time.time())

    def exposition(self) -> bytes:
        return generate_latest(self.registry)
