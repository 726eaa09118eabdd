"""The proxy restarts itself: ``--supervise`` brings a killed proxy back on the same port."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import aiohttp
import pytest

from proxy.supervise import RestartDelay, child_argv
from tests.support.calls import completion
from tests.support.fleet import run_sim
from tests.support.servers import free_port
from tests.support.waiting import eventually

RESTART_BOUND_S = 20.0  # "within a couple of seconds" on a quiet machine; room for a busy one
GAP_TIMEOUT = aiohttp.ClientTimeout(total=RESTART_BOUND_S)  # a request sent in a restart's gap


def test_backoff_doubles_while_children_die_young_and_resets_after_a_healthy_run() -> None:
    backoff = RestartDelay(first_s=0.5, max_s=4.0, healthy_s=60.0)
    assert [backoff.delay(1.0) for _ in range(5)] == [0.5, 1.0, 2.0, 4.0, 4.0]
    assert backoff.delay(120.0) == 0.5


def test_the_child_never_supervises_itself() -> None:
    argv = child_argv(["--port", "9000", "--supervise"])
    assert argv[-1] == "--no-supervise" and "--supervise" not in argv


@asynccontextmanager
async def supervised(*args: str) -> AsyncIterator[tuple[asyncio.subprocess.Process, str]]:
    """A supervised proxy on a free port, its state in a directory of its own (the default,
    ``<tmp>/rollout-proxy-<port>-state``, may hold what an earlier proxy on that port left)."""
    port = free_port()
    with tempfile.TemporaryDirectory() as state:
        process = await asyncio.create_subprocess_exec(
            *(sys.executable, "-m", "proxy", "--port", str(port), "--supervise"),
            *("--state-dir", state, *args),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            yield process, f"http://127.0.0.1:{port}"
        finally:
            if process.returncode is None:
                process.terminate()
                await asyncio.wait_for(process.wait(), 30)


async def status(session: aiohttp.ClientSession, url: str) -> dict[str, Any] | None:
    try:
        async with session.get(url + "/proxy/status", timeout=aiohttp.ClientTimeout(2)) as r:
            result: dict[str, Any] = await r.json()
            return result
    except (aiohttp.ClientError, TimeoutError):
        return None


async def serving(session: aiohttp.ClientSession, url: str) -> dict[str, Any]:
    """The supervised proxy's status once it routes to its replica."""
    first: dict[str, Any] = {}

    async def up() -> bool:
        answer = await status(session, url)
        if answer is not None and answer["replicas"][0]["routable"]:
            first.update(answer)
            return True
        return False

    await eventually(up, timeout=RESTART_BOUND_S, what="the proxy to serve")
    return first


async def test_a_killed_proxy_comes_back_on_the_same_port() -> None:
    args = ("--health-interval", "0.1")
    async with (
        run_sim() as sim,
        aiohttp.ClientSession() as session,
        supervised("--replica-urls", sim.url, *args) as (sup, url),
    ):
        first = await serving(session, url)
        assert first["restarts"] == 0 and first["pid"] != sup.pid
        os.kill(first["pid"], signal.SIGKILL)
        killed = time.monotonic()
        second: dict[str, Any] = {}

        async def back() -> bool:
            answer = await status(session, url)
            if answer is not None and answer["pid"] != first["pid"]:
                second.update(answer)
                return True
            return False

        await eventually(back, timeout=RESTART_BOUND_S, what="the proxy to come back")
        assert second["restarts"] == 1
        assert time.monotonic() - killed < RESTART_BOUND_S
        async with session.get(url + "/metrics") as resp:
            assert "rollout_proxy_restarts_total 1.0" in await resp.text()
        sup.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(sup.wait(), 30) == 0


@pytest.mark.parametrize("bad", [["--queue-size", "-1"]])
def test_a_bad_setting_is_not_restarted(bad: list[str]) -> None:
    port = free_port()
    started = time.monotonic()
    code = subprocess.run(
        [sys.executable, "-m", "proxy", "--port", str(port), "--supervise", *bad],
        capture_output=True,
        timeout=60,
        check=False,
    ).returncode
    assert code == 2 and time.monotonic() - started < 30


async def test_a_request_sent_while_the_proxy_restarts_waits_for_it_instead_of_being_refused() -> (
    None
):
    """The supervisor holds the listening socket across its children: a client that connects in
    the gap (the child SIGKILLed, the next one not started: at least ``RestartDelay.first_s``) waits
    in the accept queue and is answered by the next child, where a closed port would refuse it."""
    async with (
        run_sim() as sim,
        aiohttp.ClientSession() as session,
        supervised("--replica-urls", sim.url, "--health-interval", "0.1") as (_, url),
    ):
        first = await serving(session, url)
        os.kill(first["pid"], signal.SIGKILL)
        await eventually(lambda: _gone(first["pid"]), RESTART_BOUND_S, "the child to die")
        # A new connection, as the gap's client makes: ``session`` may still hold its kept-alive
        # one to the dead child (its close not read yet), which no supervisor can save.
        async with (
            aiohttp.ClientSession() as fresh,
            fresh.post(url + "/v1/completions", json=completion(), timeout=GAP_TIMEOUT) as resp,
        ):
            assert resp.status == 200, await resp.text()
        answer = await status(session, url)
        assert answer is not None and answer["pid"] != first["pid"] and answer["restarts"] == 1


async def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_a_port_in_use_stops_the_supervisor_in_one_line() -> None:
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        done = subprocess.run(
            [sys.executable, "-m", "proxy", "--port", str(port), "--supervise"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        f"rollout-proxy: cannot listen on 127.0.0.1:{port}: address already in use (another "
        "proxy running? pick another --port)"
    ]
