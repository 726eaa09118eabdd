"""A proxy killed and restarted with the same flags keeps its adapter window (black box).

The plain "point TRL at the proxy" setup: no ``--adapters-dir``, so nothing but the proxy itself
remembers which versions TRL loaded. The proxy runs as its own process on a fixed port; it is
SIGKILLed after TRL's loads and unload and started again with the very same command; then each
replica is restarted in turn (it comes back empty, as a restarted vLLM does). Every version of
the window must come back on both, before each is routed again, and requests for the current
version must answer 200 throughout. Without the state file the restarted proxy wants nothing:
the first restarted replica comes back empty, the second too, and the current version is gone.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp

from tests.support.adapters import write_adapter
from tests.support.calls import completion, load_body
from tests.support.fleet import Sim, run_sim
from tests.support.servers import free_port
from tests.support.waiting import eventually

BOUND_S = 30.0  # start-up and readmission take well under a second on a quiet machine
WINDOW = {"trl-policy-v2", "trl-policy-v3"}
CURRENT = "trl-policy-v3"


@asynccontextmanager
async def proxy_process(argv: list[str]) -> AsyncIterator[asyncio.subprocess.Process]:
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "proxy", *argv,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        yield process
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()


async def status(session: aiohttp.ClientSession, url: str) -> dict[str, Any] | None:
    try:
        async with session.get(url + "/proxy/status", timeout=aiohttp.ClientTimeout(2)) as r:
            answer: dict[str, Any] = await r.json()
            return answer
    except (aiohttp.ClientError, TimeoutError):
        return None


async def routable(session: aiohttp.ClientSession, url: str, replica: str | None = None) -> bool:
    answer = await status(session, url)
    if answer is None:
        return False
    entries = [r for r in answer["replicas"] if replica is None or r["id"] == replica]
    return bool(entries) and all(r["routable"] for r in entries)


class Steady:
    """A client asking for the current version, one request after another, until stopped."""

    def __init__(self, session: aiohttp.ClientSession, url: str) -> None:
        self.session, self.url = session, url
        self.statuses: list[int] = []
        self.task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        body = completion(CURRENT, prompt=[7, 1, 2, 3])
        while True:
            async with self.session.post(self.url + "/v1/completions", json=body) as response:
                self.statuses.append(response.status)
                await response.read()

    async def stop(self) -> None:
        self.task.cancel()
        await asyncio.gather(self.task, return_exceptions=True)


async def restart(stack: AsyncExitStack, sim: Sim, session: aiohttp.ClientSession, url: str) -> Sim:
    """Stop ``sim`` until the proxy has ejected it (a real vLLM takes many probes to come
    back), then start an empty one on its port (a restarted vLLM holds no adapter)."""
    port = sim.port
    await sim.stop()

    async def ejected() -> bool:
        return not await routable(session, url, sim.id)

    await eventually(ejected, timeout=BOUND_S, what=f"{sim.id} ejected")
    return await stack.enter_async_context(run_sim(port=port))


async def test_a_restarted_proxy_gets_its_window_back_onto_restarted_replicas(
    tmp_path: Path,
) -> None:
    port = free_port()
    state_dir = Path(tempfile.gettempdir()) / f"rollout-proxy-{port}-state"  # the default place
    url = f"http://127.0.0.1:{port}"
    shutil.rmtree(state_dir, True)  # another process's proxy on this port may have left one
    async with AsyncExitStack() as stack:
        stack.callback(shutil.rmtree, state_dir, True)
        sims = [await stack.enter_async_context(run_sim()) for _ in range(2)]
        session = await stack.enter_async_context(aiohttp.ClientSession())
        argv = [
            "--replica-urls", ",".join(s.url for s in sims), "--port", str(port),
            "--health-interval", "0.05", "--health-timeout", "0.5", "--log-level", "warning",
        ]  # fmt: skip
        first = await stack.enter_async_context(proxy_process(argv))
        await eventually(lambda: routable(session, url), timeout=BOUND_S, what="the proxy")
        for n in (1, 2, 3):  # TRL's syncs: load vN, then unload the one that left its window
            path = write_adapter(tmp_path, f"trl-policy-v{n}")
            async with session.post(url + "/v1/load_lora_adapter", json=load_body(
                f"trl-policy-v{n}", path)) as response:  # fmt: skip
                assert response.status == 200, await response.text()
        async with session.post(
            url + "/v1/unload_lora_adapter", json={"lora_name": "trl-policy-v1"}
        ) as response:
            assert response.status == 200

        async def written() -> bool:
            saved = list(state_dir.glob("adapters-*.json"))
            return bool(saved) and all("trl-policy-v1" not in f.read_text() for f in saved)

        await eventually(written, timeout=BOUND_S, what="the state file")
        os.kill(first.pid, signal.SIGKILL)
        await first.wait()

        await stack.enter_async_context(proxy_process(argv))  # the very same command
        await eventually(lambda: routable(session, url), timeout=BOUND_S, what="the restart")
        answer = await status(session, url)
        assert answer is not None and set(answer["adapters"]["wanted"]) == WINDOW
        steady = Steady(session, url)
        readmitted = []
        for i in range(2):
            sims[i] = await restart(stack, sims[i], session, url)
            began = time.monotonic()
            await eventually(
                lambda i=i: routable(session, url, sims[i].id),  # type: ignore[misc]
                timeout=BOUND_S,
                what=f"replica {i} readmitted",
            )
            readmitted.append(time.monotonic() - began)
            held = {a.name for a in sims[i].state.adapters.listed()}
            assert held == WINDOW, f"replica {i} was readmitted holding {held}"
            records = [(r.path, r.model) for r in sims[i].state.records]
            loads = [n for n, (path, _) in enumerate(records) if path == "/v1/load_lora_adapter"]
            served = [n for n, (path, _) in enumerate(records) if path == "/v1/completions"]
            assert not served or min(served) > max(loads), f"replica {i} served before its window"
        await steady.stop()
        assert steady.statuses and set(steady.statuses) == {200}, steady.statuses
        print(f"readmitted in {', '.join(f'{s:.2f} s' for s in readmitted)}; "
              f"{len(steady.statuses)} requests, all 200")  # fmt: skip
