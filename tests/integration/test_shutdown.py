"""The proxy as users run it (``python -m proxy``): start-up errors and graceful SIGTERM."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys

import aiohttp

from tests.support.calls import completion
from tests.support.fleet import run_sim
from tests.support.servers import free_port
from tests.support.waiting import eventually, wait_for


async def start_proxy(*args: str) -> tuple[asyncio.subprocess.Process, str]:
    port = free_port()
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "proxy", "--port", str(port), "--health-interval", "0.05", *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    assert proc.stdout is not None
    line = await asyncio.wait_for(proc.stdout.readline(), timeout=20)
    assert b"proxy ready on" in line, line
    return proc, f"http://127.0.0.1:{port}"


async def test_sigterm_lets_in_flight_requests_finish() -> None:
    async with run_sim(faults={"delay_s": 1.0}) as sim, aiohttp.ClientSession() as session:
        proc, url = await start_proxy("--replica-urls", sim.url)
        try:

            async def healthy() -> bool:
                async with session.get(url + "/health") as resp:
                    return resp.status == 200

            await eventually(healthy, timeout=10, what="proxy healthy")
            request = asyncio.create_task(session.post(url + "/v1/completions", json=completion()))

            await wait_for(lambda: sim.state.engine.in_flight > 0, what="request on the replica")
            proc.send_signal(signal.SIGTERM)
            resp = await asyncio.wait_for(request, timeout=10)
            assert resp.status == 200
            assert (await resp.json())["choices"]
            resp.release()
            assert await asyncio.wait_for(proc.wait(), timeout=10) == 0
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()


def test_bad_setting_exits_2_with_the_field_named() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "proxy", "--max-inflight", "0"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2
    assert "--max-inflight" in result.stderr and "greater than or equal to 1" in result.stderr
