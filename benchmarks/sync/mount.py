"""Suite ``sync``: fleet adapter-sync latency under lagging bucket mounts.

For each mount lag L and fleet size N: N simulated replicas, each seeing a new adapter directory
L x U(0.8, 1.0) seconds after it is written (jitter per replica), behind the proxy. The adapter is
written, the trainer's load request is sent at once, and the time to its 200 is measured; the
figure that matters is that time minus the slowest replica's lag (the proxy's own delay).
Everything runs on loopback in this process: the time is dominated by the lag, not by CPU.
"""

from __future__ import annotations

import random
import statistics
import tempfile
import time
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import aiohttp

from proxy.app import PROXY, build_app
from proxy.app import serve as serve_proxy
from proxy.config import Settings
from replica_entry.sim import Faults, SimSettings, build_sim_app
from replica_entry.sim.loopback import serve, write_adapter


async def run_point(lag_s: float, replicas: int, repeats: int, seed: int) -> dict[str, Any]:
    rng = random.Random(seed)
    lags = [lag_s * rng.uniform(0.8, 1.0) for _ in range(replicas)]
    overheads: list[float] = []
    async with AsyncExitStack() as stack:
        urls = []
        for lag in lags:
            sim = build_sim_app(SimSettings(max_loras=repeats + 2, faults=Faults(mount_lag_s=lag)))
            urls.append(await stack.enter_async_context(serve(sim)))
        settings = Settings.model_validate(
            {"replicas": urls, "health_interval": 0.2, "adapter_window": repeats + 1}
        )
        app = build_app(settings)
        proxy_url = await stack.enter_async_context(serve_proxy(app))
        session = await stack.enter_async_context(aiohttp.ClientSession())
        while len(app[PROXY].fleet.pool.routable()) < replicas:
            await _sleep(0.02)
        root = Path(stack.enter_context(tempfile.TemporaryDirectory()))
        for n in range(repeats):
            path = write_adapter(root, f"trl-policy-v{n + 1}")
            started = time.monotonic()
            body = {"lora_name": path.name, "lora_path": str(path), "load_inplace": False}
            async with session.post(proxy_url + "/v1/load_lora_adapter", json=body) as resp:
                await resp.read()
                if resp.status != 200:
                    raise RuntimeError(f"load answered {resp.status}")
            overheads.append(time.monotonic() - started - max(lags))
    return {
        "lag_s": lag_s,
        "replicas": replicas,
        "slowest_lag_s": max(lags),
        "over_lag_s": overheads,
        "p50_over_lag_s": statistics.median(overheads),
        "max_over_lag_s": max(overheads),
    }


async def _sleep(seconds: float) -> None:
    import asyncio

    await asyncio.sleep(seconds)
