"""Child processes for demos and benchmarks: start, wait for the ready line, stop by PID.

Each child gets a temp directory of its own (``TMPDIR``), removed when it is stopped: what a
proxy keeps per port there (its adapter store and state, ``proxy.adapters.wiring``) is meant to
outlive a restart of a user's proxy, not a benchmark's hundreds of throwaway ones.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import sys
import tempfile
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import aiohttp

from replica_entry.sim.loopback import free_port

ROUTABLE_TIMEOUT_S = 30.0  # for a started proxy's first probes to admit every replica


@dataclass
class Child:
    name: str
    url: str
    process: asyncio.subprocess.Process
    scratch: Path | None = None  # its TMPDIR, removed by stop_child


async def start_child(
    name: str,
    module: str,
    args: Sequence[str],
    port: int,
    *,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
) -> Child:
    """Run ``python -m module args`` (in ``cwd``, with ``env``: another build's tree, else this
    environment) with a temp directory of its own; return once it prints its ready line (at
    most 30 s)."""
    scratch = Path(tempfile.mkdtemp(prefix=f"rollout-bench-{name.replace(' ', '-')}-"))
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", module, *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
        cwd=cwd,
        env={**(os.environ if env is None else env), "TMPDIR": str(scratch)},
    )  # fmt: skip
    assert process.stdout is not None
    why = "failed to start"
    try:
        line = await asyncio.wait_for(process.stdout.readline(), timeout=30)
    except TimeoutError:
        line, why = b"", "did not start within 30 s"
    if b"ready on" not in line:
        if process.returncode is None:  # running but not ready (or silent): not kept
            process.kill()
        code = await process.wait()
        shutil.rmtree(scratch, ignore_errors=True)
        raise RuntimeError(f"{name} {why} (exit code {code})")
    return Child(name, f"http://127.0.0.1:{port}", process, scratch)


async def start_proxy(
    replica_urls: Sequence[str],
    *flags: str,
    name: str = "proxy",
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
) -> Child:
    """``python -m proxy`` on a free loopback port in front of ``replica_urls``, quiet logs."""
    port = free_port()
    args = ["--port", str(port), "--replica-urls", ",".join(replica_urls), "--log-level", "warning"]
    return await start_child(name, "proxy", [*args, *flags], port, cwd=cwd, env=env)


async def wait_routable(url: str, replicas: int, timeout_s: float = ROUTABLE_TIMEOUT_S) -> None:
    """Until the proxy at ``url`` routes to ``replicas`` replicas (its ``/health``)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    async with aiohttp.ClientSession() as session:
        while True:
            async with session.get(url + "/health") as resp:
                routable = (await resp.json()).get("routable")
            if routable == replicas:
                return
            if loop.time() > deadline:
                raise RuntimeError(
                    f"the proxy routes to {routable} of {replicas} replicas after {timeout_s:g} s"
                )
            await asyncio.sleep(0.05)


async def stop_child(child: Child, grace_s: float = 10.0) -> int:
    """SIGTERM, wait; SIGKILL if it does not exit in time; then its temp directory goes.
    Returns the exit code."""
    if child.process.returncode is None:
        child.process.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(child.process.wait(), timeout=grace_s)
        except TimeoutError:
            child.process.kill()
            await child.process.wait()
    if child.scratch is not None:
        shutil.rmtree(child.scratch, ignore_errors=True)
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
