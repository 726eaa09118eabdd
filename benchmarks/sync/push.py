"""Suite ``sync --push``: TRL's load request to its 200 (every replica loaded), pushed vs the
mount path, in one run.

Each point: N simulated replicas in this process (uvloop), each seeing a new directory on its
"bucket mount" ``lag x U(0.8, 1.0)`` seconds after it was written, behind a proxy that either
pushes (``push``: into each replica's receiver, then loads from there) or only loads from the
mount (``mount``: today's path, ``--no-adapter-push``). An adapter of the given size is written,
the load is sent at once and timed; ``window 1`` makes the proxy retire the previous version, so
each replica's store holds one version at a time (the next one waits until it is gone).

``--adapter-push-rate`` models the proxy's upload link (a WAN), shared by all replicas.

The model (``calibrate``): on this machine a push costs ``t0 + bytes / B`` with ``bytes = size
x replicas``, where ``t0`` (requests, vLLM's load, the answers) and ``B`` (the whole pipe: the
proxy reading and hashing each file once, loopback HTTP, each receiver hashing, writing and
fsyncing, all on the same 2 cores) come from two single-replica pushes (5 and 200 MB); with a
link limit the bytes go at ``min(link, B)``. The disk's write + fsync rate and sha256's rate are
measured alone and reported as parts of ``B``. The simulated replica's own load time is ~0:
real vLLM's is in the e2e report (``make e2e``).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import random
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import aiohttp

from adapter_receiver.store import FileSink
from proxy.app import PROXY, build_app
from proxy.app import serve as serve_proxy
from proxy.config import Settings
from replica_entry.sim import SIM_STATE, Faults, SimSettings, build_sim_app
from replica_entry.sim.loopback import serve

MB = 1_000_000
_BLOCK = random.Random(7).randbytes(1 << 20)


def write_adapter(root: Path, name: str, size: int) -> Path:
    """A PEFT-shaped adapter directory whose weights file is ``size`` bytes, published as TRL
    does: written in a temporary directory, then renamed into place."""
    path = root / f".{name}.tmp"
    path.mkdir(parents=True)
    config = {"peft_type": "LORA", "r": 1, "lora_alpha": 2, "target_modules": ["q_proj"]}
    (path / "adapter_config.json").write_text(json.dumps(config))
    with (path / "adapter_model.safetensors").open("wb") as handle:
        left = size
        while left > 0:
            handle.write(_BLOCK[: min(left, len(_BLOCK))])
            left -= len(_BLOCK)
    return path.rename(root / name)


async def run_point(
    *,
    mode: str,
    lag_s: float,
    size: int,
    replicas: int,
    link: float | None,
    repeats: int,
    seed: int,
    root: Path,
) -> dict[str, Any]:
    """One grid point: ``repeats`` loads, each timed from request to 200."""
    rng = random.Random(seed)
    lags = [lag_s * rng.uniform(0.8, 1.0) for _ in range(replicas)]
    times: list[float] = []
    async with AsyncExitStack() as stack:
        apps = []
        for i, lag in enumerate(lags):
            settings = SimSettings(
                max_loras=4,
                adapter_store=str(root / f"store-{i}"),
                adapter_max_bytes=1 << 31,
                faults=Faults(mount_lag_s=lag),
            )
            apps.append(build_sim_app(settings))
        urls = [await stack.enter_async_context(serve(app)) for app in apps]
        proxy_settings: dict[str, Any] = {
            "replicas": urls,
            "health_interval": 0.2,
            "adapter_window": 1,
            "adapter_push": mode == "push",
            "adapter_store": str(root / "proxy-store"),
        }
        if link is not None:
            proxy_settings["adapter_push_rate"] = int(link)
        app = build_app(Settings.model_validate(proxy_settings))
        proxy_url = await stack.enter_async_context(serve_proxy(app))
        session = await stack.enter_async_context(aiohttp.ClientSession())
        await _routable(app, replicas)
        source = root / "bucket"
        for n in range(1, repeats + 1):
            path = await asyncio.to_thread(write_adapter, source, f"trl-policy-v{n}", size)
            body = {"lora_name": path.name, "lora_path": str(path), "load_inplace": False}
            started = time.perf_counter()
            async with session.post(proxy_url + "/v1/load_lora_adapter", json=body) as resp:
                text = await resp.text()
                if resp.status != 200:
                    raise RuntimeError(f"load answered {resp.status}: {text[:300]}")
            times.append(time.perf_counter() - started)
            await _settled(apps, path.name)
            await asyncio.to_thread(shutil.rmtree, source / f"trl-policy-v{n - 1}", True)
    return {
        "mode": mode,
        "lag_s": lag_s,
        "size_mb": size / MB,
        "replicas": replicas,
        "link_mb_s": None if link is None else link / MB,
        "slowest_lag_s": max(lags),
        "times_s": times,
        "p50_s": statistics.median(times),
        "max_s": max(times),
    }


async def _routable(app: Any, replicas: int) -> None:
    for _ in range(3000):
        if len(app[PROXY].fleet.pool.routable()) == replicas:
            return
        await asyncio.sleep(0.01)
    raise RuntimeError("the replicas never became routable")


async def _settled(apps: list[Any], name: str) -> None:
    """Until every replica holds only ``name`` (the previous version unloaded, its copy gone)."""
    for _ in range(3000):
        if all([a.name for a in app[SIM_STATE].adapters.listed()] == [name] for app in apps):
            return
        await asyncio.sleep(0.01)
    raise RuntimeError("the previous version was never unloaded")


def _rate(measure: Callable[[Path], None], size: int) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        started = time.perf_counter()
        measure(Path(tmp))
        return size / (time.perf_counter() - started)


def disk_rate(size: int = 200 * MB) -> float:
    """Bytes/s to write and fsync one file through the receiver's own sink."""

    def write(tmp: Path) -> None:
        sink = FileSink(tmp / "weights")
        for _ in range(size // len(_BLOCK)):
            sink.write(_BLOCK)
        sink.finish()

    return _rate(write, size)


def sha256_rate(size: int = 200 * MB) -> float:
    def digest(_tmp: Path) -> None:
        hasher = hashlib.sha256()
        for _ in range(size // len(_BLOCK)):
            hasher.update(_BLOCK)

    return _rate(digest, size)


def predict(model: dict[str, float], size_mb: float, replicas: int, link: float | None) -> float:
    rate = model["bytes_per_s"] if link is None else min(link, model["bytes_per_s"])
    return model["t0_s"] + size_mb * MB * replicas / rate


def calibrate(run: Callable[..., dict[str, Any]]) -> dict[str, float]:
    """``t0`` and ``B`` from single-replica pushes of 5 and 200 MB (medians of 3)."""
    small = run(mode="push", lag_s=0.0, size=5 * MB, replicas=1, link=None, repeats=3)
    large = run(mode="push", lag_s=0.0, size=200 * MB, replicas=1, link=None, repeats=3)
    rate = 195 * MB / (large["p50_s"] - small["p50_s"])
    return {
        "t0_s": max(small["p50_s"] - 5 * MB / rate, 0.0),
        "bytes_per_s": rate,
        "disk_write_fsync_bytes_per_s": disk_rate(),
        "sha256_bytes_per_s": sha256_rate(),
        "cpu_count": float(os.cpu_count() or 0),
    }
