"""Child processes for demos and benchmarks: start, wait for the ready line, stop by PID."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass

from replica_entry.sim.loopback import free_port


@dataclass
class Child:
    name: str
    url: str
    process: asyncio.subprocess.Process


async def start_child(name: str, module: str, args: Sequence[str], port: int) -> Child:
    """Run ``python -m module args``; return once it prints its ready line (at most 30 s)."""
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", module, *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
    )  # fmt: skip
    assert process.stdout is not None
    try:
        line = await asyncio.wait_for(process.stdout.readline(), timeout=30)
    except TimeoutError:
        process.kill()
        raise RuntimeError(f"{name} did not start within 30 s") from None
    if b"ready on" not in line:
        await process.wait()
        raise RuntimeError(f"{name} failed to start (exit code {process.returncode})")
    return Child(name, f"http://127.0.0.1:{port}", process)


async def start_proxy(replica_urls: Sequence[str], *flags: str) -> Child:
    """``python -m proxy`` on a free loopback port in front of ``replica_urls``, quiet logs."""
    port = free_port()
    args = ["--port", str(port), "--replica-urls", ",".join(replica_urls), "--log-level", "warning"]
    return await start_child("proxy", "proxy", [*args, *flags], port)


async def stop_child(child: Child, grace_s: float = 10.0) -> int:
    """SIGTERM, wait; SIGKILL if it does not exit in time. Returns the exit code."""
    if child.process.returncode is None:
        child.process.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(child.process.wait(), timeout=grace_s)
        except TimeoutError:
            child.process.kill()
            await child.process.wait()
    code = child.process.returncode
    return code if code is not None else -1


@contextlib.asynccontextmanager
async def children() -> AsyncIterator[list[Child]]:
    """A list to append started children to; all are stopped on exit, last started first."""
    started: list[Child] = []
    try:
        yield started
    finally:
        for child in reversed(started):
            await stop_child(child)
