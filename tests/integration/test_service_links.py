"""Kubernetes' service links for a Service named ``proxy`` (``PROXY_SERVICE_HOST``,
``PROXY_PORT=tcp://...``, ``PROXY_PORT_8000_TCP_ADDR``, ...) once stopped ``rollout-proxy`` at
start as unknown ``PROXY_*`` settings (exit 2). The real process, as a pod would run it: it
starts and is healthy with them, with ``--port`` and without (its port then from the config
file, which ``PROXY_PORT`` would beat if it were read as the port), says in one line that it
ignores them, and still stops on a real typo with "did you mean"."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import pytest

from proxy.config.service_links import is_service_link, service_links
from tests.support.fleet import run_sim
from tests.support.servers import free_port
from tests.support.waiting import eventually

# What the kubelet writes into every pod of the namespace for a Service "proxy" on 8000/TCP
# (port name "http").
LINKS = {
    "PROXY_SERVICE_HOST": "10.96.0.11",
    "PROXY_SERVICE_PORT": "8000",
    "PROXY_SERVICE_PORT_HTTP": "8000",
    "PROXY_PORT": "tcp://10.96.0.11:8000",
    "PROXY_PORT_8000_TCP": "tcp://10.96.0.11:8000",
    "PROXY_PORT_8000_TCP_PROTO": "tcp",
    "PROXY_PORT_8000_TCP_PORT": "8000",
    "PROXY_PORT_8000_TCP_ADDR": "10.96.0.11",
}
START_BOUND_S = 30.0  # a start takes about a second; room for a busy machine


@dataclass
class Running:
    url: str
    stderr: str = ""  # all of it, once the process has stopped


@asynccontextmanager
async def proxy(argv: Sequence[str], env: dict[str, str]) -> AsyncIterator[Running]:
    """``python -m proxy ARGV`` with ``env`` added, from the moment it says it is ready."""
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "proxy", *argv,
        env={**os.environ, **env},
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    assert process.stdout is not None and process.stderr is not None
    try:
        line = await asyncio.wait_for(process.stdout.readline(), START_BOUND_S)
        assert b"proxy ready on" in line, line + await process.stderr.read()
        running = Running(line.decode().split("proxy ready on ", 1)[1].strip())
        yield running
    finally:
        if process.returncode is None:
            process.send_signal(signal.SIGTERM)
        _, err = await asyncio.wait_for(process.communicate(), START_BOUND_S)
    running.stderr = err.decode()


async def _healthy(url: str) -> None:
    async with aiohttp.ClientSession() as session:

        async def ok() -> bool:
            async with session.get(url + "/health") as answer:
                return answer.status == 200

        await eventually(ok, timeout=START_BOUND_S, what="the proxy's /health", interval=0.1)


@pytest.mark.parametrize("port_from", ["flag", "file"])
async def test_the_proxy_starts_healthy_among_a_services_links(
    port_from: str, tmp_path: Path
) -> None:
    port = free_port()
    env = dict(LINKS)
    argv = ["--health-interval", "0.05"]
    if port_from == "flag":
        argv += ["--port", str(port)]
    else:
        config = tmp_path / "proxy.toml"
        config.write_text(f"port = {port}\n")
        env["PROXY_CONFIG"] = str(config)
    async with run_sim() as sim, proxy([*argv, "--replica-urls", sim.url], env) as running:
        assert running.url == f"http://127.0.0.1:{port}"
        await _healthy(running.url)
    said = [line for line in running.stderr.splitlines() if "service-link" in line]
    assert len(said) == 1 and "enableServiceLinks: false" in said[0], running.stderr
    assert ", ".join(sorted(LINKS)) in said[0]


def test_a_real_typo_among_the_links_still_stops_it_naming_the_setting() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "proxy", "--port", "0"],
        env={**os.environ, **LINKS, "PROXY_PROT": "1"},
        capture_output=True, text=True, timeout=START_BOUND_S,
    )  # fmt: skip
    assert done.returncode == 2
    assert done.stderr == (
        "rollout-proxy: unknown environment variable PROXY_PROT: did you mean PROXY_PORT?\n"
    )


def test_the_links_are_known_by_their_shapes_only() -> None:
    assert service_links({**LINKS, "PROXY_PROT": "1", "PROXY_PORT_X": "1"}, "PROXY_") == sorted(
        LINKS
    )
    assert is_service_link("PROXY_ADMIN_SERVICE_HOST", "10.0.0.1")  # a Service "proxy-admin"
    assert is_service_link("PROXY_PORT_9090_UDP_ADDR", "10.0.0.1")
    assert not is_service_link("PROXY_PORT", "8000")  # the setting
    assert not is_service_link("PROXY_PORT", "tcp://10.0.0.1")  # no port: not a link's shape
