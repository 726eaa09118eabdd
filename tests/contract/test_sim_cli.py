"""``python -m replica_entry --backend sim`` as a process: ready line, serving, clean stop."""

from __future__ import annotations

import asyncio
import re
import signal
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import aiohttp
import pytest

from tests.contract.support import sim_only

pytestmark = sim_only

READY = re.compile(r"^replica ready on (http://[\d.]+:\d+) \(model (\S+)\)$")


@asynccontextmanager
async def replica_process(*args: str) -> AsyncIterator[tuple[asyncio.subprocess.Process, str]]:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "replica_entry",
        "--backend",
        "sim",
        "--port",
        "0",
        *args,
        stdout=asyncio.subprocess.PIPE,
    )
    try:
        assert process.stdout is not None
        line = await asyncio.wait_for(process.stdout.readline(), 30)
        match = READY.match(line.decode().strip())
        assert match, line
        yield process, match.group(1)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
async def test_the_replica_serves_until_signalled_then_exits_0(
    http: aiohttp.ClientSession, signum: signal.Signals
) -> None:
    async with replica_process("--model", "cli-model", "--block-size", "32") as (process, url):
        async with http.get(url + "/health") as response:
            assert response.status == 200
        async with http.get(url + "/v1/models") as response:
            assert (await response.json())["data"][0]["id"] == "cli-model"
        process.send_signal(signum)
        assert await asyncio.wait_for(process.wait(), 30) == 0
