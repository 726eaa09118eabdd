"""The proxy's own limits are not a replica's fault: a proxy out of file descriptors answers 503
and says so, and no replica is ejected or has its probes counted against it.

The proxy runs as a child process with a small open-files limit (``RLIMIT_NOFILE``, which it
cannot raise above the hard limit), and the test takes the descriptors left with idle client
connections, for real."""

from __future__ import annotations

import asyncio
import resource
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import orjson

from proxy.upstream.errors import LocalResourceError
from tests.support.calls import completion
from tests.support.fleet import run_sim
from tests.support.refusals import SHAPE, provokes
from tests.support.servers import free_port
from tests.support.waiting import eventually

FILES = 40  # a new proxy uses about 17 descriptors; the rest go to clients and upstreams
QUICK_S = 10.0


def _limit_files() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (FILES, FILES))


@asynccontextmanager
async def starved_proxy(replica: str) -> AsyncIterator[int]:
    port = free_port()
    process = await asyncio.create_subprocess_exec(
        *(sys.executable, "-m", "proxy", "--replica-urls", replica, "--port", str(port)),
        *("--health-interval", "0.2"),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        preexec_fn=_limit_files,
    )
    try:
        assert process.stdout is not None
        while b"proxy ready on" not in await asyncio.wait_for(process.stdout.readline(), 60):
            pass
        yield port
    finally:
        process.terminate()
        await asyncio.wait_for(process.communicate(), 30)


class Client:
    """One kept-alive HTTP/1.1 client connection, on raw sockets."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    async def ask(self, method: str, path: str, body: bytes = b"") -> tuple[int, bytes]:
        head = f"{method} {path} HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n"
        self.writer.write(head.encode() + b"Content-Type: application/json\r\n\r\n" + body)
        status_line = await asyncio.wait_for(self.reader.readline(), QUICK_S)
        if not status_line:
            raise ConnectionError("closed")
        length = 0
        while (line := await self.reader.readline()) not in (b"\r\n", b""):
            if line.lower().startswith(b"content-length:"):
                length = int(line.split(b":")[1])
        return int(status_line.split()[1]), await self.reader.readexactly(length)

    def close(self) -> None:
        self.writer.close()


async def connect(port: int) -> Client | None:
    """A client connection the proxy accepted and answers on, or None when it cannot."""
    client = Client(*await asyncio.open_connection("127.0.0.1", port))
    try:
        await client.ask("GET", "/health")
    except (ConnectionError, TimeoutError, asyncio.IncompleteReadError):
        client.close()
        return None
    return client


async def routable(client: Client) -> None:
    async def healthy() -> bool:
        return (await client.ask("GET", "/health"))[0] == 200

    await eventually(healthy, timeout=QUICK_S, what="the replica admitted", interval=0.1)


@provokes(LocalResourceError)
async def test_out_of_file_descriptors_is_a_503_and_no_replica_pays() -> None:
    async with run_sim() as sim, starved_proxy(sim.url) as port:
        first = await connect(port)
        assert first is not None
        await routable(first)
        clients = [first]
        while len(clients) < FILES and (client := await connect(port)) is not None:
            clients.append(client)
        assert 3 < len(clients) < FILES, "the descriptors should run out before the clients"
        probe = clients[0]
        body = orjson.dumps(completion())
        status, answer = await probe.ask("POST", "/v1/completions", body)
        assert status == 503, answer
        assert b"cannot open a connection" in answer
        error = orjson.loads(answer)["error"]
        assert set(error) == SHAPE and error["code"] == 503
        await asyncio.sleep(1.0)  # several probe rounds, every one of them starved
        status, raw = await probe.ask("GET", "/proxy/status")
        replicas = orjson.loads(raw)["replicas"]
        assert [r["state"] for r in replicas] == ["healthy"]
        status, text = await probe.ask("GET", "/metrics")
        ejections = [
            line
            for line in text.decode().splitlines()
            if line.startswith("rollout_proxy_ejections_total{") and not line.endswith(" 0.0")
        ]
        assert ejections == []
        assert b'rollout_proxy_rejections_total{reason="local_resources"} 1.0' in text
        for client in clients[1:]:
            client.close()
        answers: list[tuple[int, bytes]] = []

        async def served() -> bool:  # once the proxy has seen the closes
            answers.append(await probe.ask("POST", "/v1/completions", body))
            return answers[-1][0] != 503

        await eventually(served, timeout=QUICK_S, what="descriptors freed")
        status, answer = answers[-1]
        assert status == 200, answer
        probe.close()
