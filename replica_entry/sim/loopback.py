"""Loopback helpers for whoever runs simulated replicas, the benchmarks and the tests alike: a
real aiohttp app (a simulated replica, a stand-in) on an ephemeral port, a free port for a child
process, and an adapter directory as TRL writes it (its base model is the simulated replica's).

Here rather than in ``benchmarks/`` or ``tests/``: the tests must not depend on the benchmark
suite for their fixtures, the benchmarks cannot import ``tests/``, and both already depend on
the simulated replica, which these helpers serve and feed."""

from __future__ import annotations

import hashlib
import json
import socket
import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from aiohttp import web


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (for subprocess servers)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@asynccontextmanager
async def serve(
    app: web.Application,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    ssl_context: ssl.SSLContext | None = None,
    **runner_kwargs: Any,
) -> AsyncIterator[str]:
    """Run ``app`` on a loopback port (ephemeral by default); yield its base URL; clean up."""
    runner_kwargs.setdefault("shutdown_timeout", 2.0)
    runner_kwargs.setdefault("access_log", None)
    runner = web.AppRunner(app, handle_signals=False, **runner_kwargs)
    await runner.setup()
    site = web.TCPSite(runner, host, port, ssl_context=ssl_context)
    await site.start()
    port = runner.addresses[0][1]  # the bound one, when 0 was asked (asyncio's or uvloop's)
    try:
        scheme = "https" if ssl_context is not None else "http"
        yield f"{scheme}://{host}:{port}"
    finally:
        await runner.cleanup()


def write_adapter(root: Path, name: str, rank: int = 1) -> Path:
    """Create ``root/name`` holding a minimal PEFT LoRA adapter; return its absolute path."""
    path = root / name
    path.mkdir(parents=True, exist_ok=True)
    config = {
        "peft_type": "LORA",
        "r": rank,
        "lora_alpha": 2 * rank,
        "target_modules": ["q_proj", "v_proj"],
        "base_model_name_or_path": "sim-model",
        "task_type": "CAUSAL_LM",
    }
    (path / "adapter_config.json").write_text(json.dumps(config))
    # Weights of its own per name: two versions are two policies (``sim.policy``).
    (path / "adapter_model.safetensors").write_bytes(hashlib.sha256(name.encode()).digest() * 2)
    return path.resolve()
