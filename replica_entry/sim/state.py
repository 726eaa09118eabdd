"""The state object of one simulated replica, stored on its app under ``SIM_STATE``."""

from __future__ import annotations

import shutil
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from aiohttp import web

from adapter_receiver.receive import Limits, Receiver
from adapter_receiver.store import Store
from replica_entry.sim.adapters import AdapterRegistry
from replica_entry.sim.engine import Engine
from replica_entry.sim.generation import Simulator
from replica_entry.sim.latency import LatencyModel
from replica_entry.sim.metrics import EngineSnapshot, SimMetrics
from replica_entry.sim.prefix_cache import PrefixCache
from replica_entry.sim.records import RequestLog
from replica_entry.sim.settings import Faults, SimSettings


@dataclass
class SimState:
    """Everything one replica knows. ``faults`` is the only part replaced at run time."""

    settings: SimSettings
    clock: Callable[[], float] = time.time
    faults: Faults = field(init=False)
    adapters: AdapterRegistry = field(init=False)
    engine: Engine = field(init=False)
    cache: PrefixCache = field(init=False)
    metrics: SimMetrics = field(init=False)
    records: RequestLog = field(init=False)
    simulator: Simulator = field(init=False)
    store_root: Path | None = field(init=False)
    _receiver: Receiver | None = field(init=False, default=None)

    def __post_init__(self) -> None:
        s = self.settings
        self.store_root = None
        if s.adapter_receiver:
            default = Path(tempfile.gettempdir()) / f"sim-adapters-{uuid.uuid4().hex[:12]}"
            self.store_root = Path(s.adapter_store) if s.adapter_store else default
        self.faults = s.faults
        self.adapters = AdapterRegistry(s.max_lora_rank, self.clock)
        self.engine = Engine(s.max_num_seqs, s.kv_blocks)
        self.cache = PrefixCache(s.block_size, s.cache_blocks)
        self.metrics = SimMetrics(s.model)
        self.records = RequestLog()
        latency = LatencyModel(s.overhead_s, s.prompt_token_s, s.gen_token_s, s.batch_factor,
                               s.later_version, s.later_gen_token_s or 0.0)  # fmt: skip
        self.simulator = Simulator(self.engine, self.cache, latency, self.metrics, s.vocab_size)

    @property
    def receiver(self) -> Receiver | None:
        """The adapter receiver; its store is created (emptied) on first use."""
        if self._receiver is None and self.store_root is not None:
            store = Store(self.store_root, self.settings.adapter_store_max_bytes)
            store.reset()
            limits = Limits(max_adapter_bytes=self.settings.adapter_max_bytes)
            self._receiver = Receiver(store, limits)
        return self._receiver

    def stored(self, path: str) -> bool:
        """Whether ``path`` is in the receiver's store (local disk: no mount lag)."""
        return self._receiver is not None and self._receiver.store.lookup(path) is not None

    def close(self) -> None:
        """Stop the receiver; a store directory of our own making goes too."""
        if self._receiver is not None:
            self._receiver.close()
            if not self.settings.adapter_store:
                shutil.rmtree(self._receiver.store.root, ignore_errors=True)
            self._receiver = None

    def engine_snapshot(self) -> EngineSnapshot:
        return EngineSnapshot(
            running=self.engine.running,
            waiting=self.engine.waiting,
            running_loras=tuple(self.engine.running_by_lora),
            max_loras=self.settings.max_loras,
            kv_usage=self.engine.kv_usage(self.settings.cache_blocks),
        )

    def counters(self) -> dict[str, int]:
        """Request counters plus the engine's live figures."""
        engine = self.engine
        return {
            "total": self.records.total,
            "cancelled": self.records.cancelled,
            "dropped": self.records.dropped,
            "in_flight": engine.in_flight,
            "max_in_flight": engine.max_in_flight,
            "waiting": engine.waiting,
            "running": engine.running,
        }


SIM_STATE = web.AppKey("sim_state", SimState)
