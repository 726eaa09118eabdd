"""Pause modes of the simulated engine, observed from outside and through its state."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import aiohttp

from replica_entry.sim import SIM_STATE
from tests.contract.support import sse_events
from tests.support.fleet import SimServer
from tests.support.waiting import wait_for

PROMPT = list(range(100, 140))


async def _complete(http: aiohttp.ClientSession, url: str, **body: Any) -> dict[str, Any]:
    async with http.post(url + "/v1/completions", json={"prompt": PROMPT, **body}) as response:
        assert response.status == 200
        answer: dict[str, Any] = await response.json()
        return answer


async def _post(http: aiohttp.ClientSession, url: str) -> Any:
    async with http.post(url) as response:
        assert response.status == 200
        return await response.json()


async def test_requests_arriving_while_paused_wait_for_resume(
    http: aiohttp.ClientSession, sim_server: SimServer
) -> None:
    async with sim_server() as (url, app):
        engine = app[SIM_STATE].engine
        await _post(http, url + "/pause?mode=keep")
        tasks = [asyncio.create_task(_complete(http, url, max_tokens=2)) for _ in range(3)]
        await wait_for(lambda: engine.waiting == 3)
        assert engine.running == 0
        assert not any(task.done() for task in tasks)
        await _post(http, url + "/resume")
        answers = await asyncio.gather(*tasks)
        assert all(a["usage"]["completion_tokens"] == 2 for a in answers)
        assert engine.waiting == engine.in_flight == 0


async def test_keep_freezes_running_requests_and_resume_finishes_them(
    http: aiohttp.ClientSession, sim_server: SimServer
) -> None:
    async with sim_server(gen_token_s=0.003) as (url, app):
        engine = app[SIM_STATE].engine
        task = asyncio.create_task(_complete(http, url, max_tokens=200))
        await wait_for(lambda: engine.running == 1)
        await _post(http, url + "/pause?mode=keep")
        assert engine.gate.frozen
        assert engine.running == 1
        assert not task.done()
        await _post(http, url + "/resume")
        answer = await task
        assert answer["choices"][0]["finish_reason"] == "length"
        assert answer["usage"]["completion_tokens"] == 200


async def test_abort_ends_running_requests_with_finish_reason_abort(
    http: aiohttp.ClientSession, sim_server: SimServer
) -> None:
    async with sim_server(gen_token_s=0.01) as (url, app):
        engine = app[SIM_STATE].engine
        task = asyncio.create_task(_complete(http, url, max_tokens=3000))
        await wait_for(lambda: engine.running == 1)
        assert await _post(http, url + "/pause?mode=abort") == {"status": "paused"}
        assert engine.running == 0
        answer = await task
        assert answer["choices"][0]["finish_reason"] == "abort"
        assert answer["usage"]["completion_tokens"] < 3000
        await _post(http, url + "/resume")


async def test_abort_closes_a_stream_with_an_abort_chunk(
    http: aiohttp.ClientSession, sim_server: SimServer
) -> None:
    body = {"prompt": PROMPT, "max_tokens": 3000, "stream": True}
    async with (
        sim_server(gen_token_s=0.01) as (url, _),
        http.post(url + "/v1/completions", json=body) as response,
    ):
        await response.content.readuntil(b"\n\n")
        await _post(http, url + "/pause?mode=abort")
        events = sse_events(await response.read())
    assert events[-1] == "[DONE]"
    assert json.loads(events[-2])["choices"][0]["finish_reason"] == "abort"


async def test_wait_returns_once_running_requests_are_done(
    http: aiohttp.ClientSession, sim_server: SimServer
) -> None:
    async with sim_server(gen_token_s=0.005) as (url, app):
        engine = app[SIM_STATE].engine
        task = asyncio.create_task(_complete(http, url, max_tokens=40))
        await wait_for(lambda: engine.running == 1)
        await _post(http, url + "/pause?mode=wait")
        assert engine.running == 0
        answer = await task
        assert answer["choices"][0]["finish_reason"] == "length"
        await _post(http, url + "/resume")


async def test_wait_and_abort_clear_the_prefix_cache_but_keep_does_not(
    http: aiohttp.ClientSession, sim_server: SimServer
) -> None:
    async with sim_server() as (url, _):

        async def cached() -> int:
            answer = await _complete(http, url, max_tokens=1)
            hit: int = answer["usage"]["prompt_tokens_details"]["cached_tokens"]
            return hit

        await cached()
        for mode, survives in (("keep", True), ("wait", False), ("abort", False)):
            await cached()
            await _post(http, url + f"/pause?mode={mode}")
            await _post(http, url + "/resume")
            assert (await cached() > 0) is survives, mode
