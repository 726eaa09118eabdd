"""Fault injection of the simulated replica (``/sim/faults`` and what each fault does)."""

from __future__ import annotations

import asyncio
import json
from contextlib import suppress

import aiohttp
import pytest

from replica_entry.sim import SIM_STATE, Faults
from tests.contract.support import assert_error
from tests.support.fleet import SimServer
from tests.support.waiting import wait_for

COMPLETION = {"prompt": [1, 2, 3, 4], "max_tokens": 4}


async def _faults(http: aiohttp.ClientSession, url: str, patch: object) -> tuple[int, object]:
    async with http.post(url + "/sim/faults", json=patch) as response:
        return response.status, await response.json()


async def test_faults_start_clear(http: aiohttp.ClientSession, sim_server: SimServer) -> None:
    async with sim_server() as (url, _), http.get(url + "/sim/faults") as response:
        assert await response.json() == Faults().model_dump()


async def test_posted_faults_merge_into_the_current_set(
    http: aiohttp.ClientSession, sim_server: SimServer
) -> None:
    async with sim_server() as (url, app):
        assert await _faults(http, url, {"delay_s": 0.5}) == (
            200,
            {**Faults().model_dump(), "delay_s": 0.5},
        )
        status, faults = await _faults(http, url, {"unhealthy": True})
        assert status == 200
        assert faults == {**Faults().model_dump(), "delay_s": 0.5, "unhealthy": True}
        assert app[SIM_STATE].faults == Faults(delay_s=0.5, unhealthy=True)


@pytest.mark.parametrize(
    ("patch", "field"),
    [
        ({"fail_status": 200}, "fail_status"),
        ({"fail_status": "500"}, "fail_status"),
        ({"delay_s": -1}, "delay_s"),
        ({"unhealthy": "yes"}, "unhealthy"),
        ({"bogus": 1}, "bogus"),
    ],
)
async def test_an_invalid_fault_is_refused_naming_its_field(
    http: aiohttp.ClientSession, sim_server: SimServer, patch: dict[str, object], field: str
) -> None:
    async with sim_server() as (url, app):
        status, body = await _faults(http, url, patch)
        assert status == 400
        assert isinstance(body, dict)
        assert field in assert_error(body, 400)
        assert body["error"]["param"] == field
        assert app[SIM_STATE].faults == Faults()


async def test_faults_must_be_a_json_object(
    http: aiohttp.ClientSession, sim_server: SimServer
) -> None:
    async with sim_server() as (url, _):
        assert (await _faults(http, url, [1]))[0] == 400
        async with http.post(url + "/sim/faults", data=b"{nope") as response:
            assert response.status == 400


async def test_unhealthy_fails_the_health_check(
    http: aiohttp.ClientSession, sim_server: SimServer
) -> None:
    async with sim_server(faults=Faults(unhealthy=True)) as (url, _):
        async with http.get(url + "/health") as response:
            assert response.status == 503
        await _faults(http, url, {"unhealthy": False})
        async with http.get(url + "/health") as response:
            assert response.status == 200


@pytest.mark.parametrize("path", ["/v1/completions", "/v1/chat/completions"])
async def test_fail_status_fails_generation_with_a_vllm_error(
    http: aiohttp.ClientSession, sim_server: SimServer, path: str
) -> None:
    body = {**COMPLETION, "messages": [{"role": "user", "content": "hi"}]}
    async with sim_server(faults=Faults(fail_status=503)) as (url, _):
        async with http.post(url + path, json=body) as response:
            assert response.status == 503
            assert_error(await response.json(), 503)
        async with http.get(url + "/v1/models") as response:
            assert response.status == 200


async def test_delay_holds_a_request_in_flight_before_it_runs(
    http: aiohttp.ClientSession, sim_server: SimServer
) -> None:
    async with sim_server(faults=Faults(delay_s=60.0)) as (url, app):
        state = app[SIM_STATE]
        task = asyncio.create_task(http.post(url + "/v1/completions", json=COMPLETION))
        await wait_for(lambda: state.engine.in_flight == 1)
        assert state.engine.running == 0
        task.cancel()
        with suppress(asyncio.CancelledError):
            await task
        # The replica notices the client left and gives the request up.
        await wait_for(lambda: state.engine.in_flight == 0)
        assert state.records[-1].cancelled


async def test_drop_mid_response_cuts_a_json_answer(
    http: aiohttp.ClientSession, sim_server: SimServer
) -> None:
    async with sim_server(faults=Faults(drop_mid_response=True)) as (url, app):
        async with http.post(url + "/v1/completions", json=COMPLETION) as response:
            assert response.status == 200
            with pytest.raises(aiohttp.ClientPayloadError):
                await response.read()
        records = app[SIM_STATE].records
        await wait_for(lambda: records.dropped == 1)
        assert records[-1].dropped


async def test_drop_mid_response_cuts_a_stream_after_one_chunk(
    http: aiohttp.ClientSession, sim_server: SimServer
) -> None:
    body = {**COMPLETION, "stream": True}
    async with (
        sim_server(faults=Faults(drop_mid_response=True)) as (url, _),
        http.post(url + "/v1/completions", json=body) as response,
    ):
        assert response.status == 200
        first = await response.content.readuntil(b"\n\n")
        assert json.loads(first.removeprefix(b"data: "))["object"] == "text_completion"
        with pytest.raises(aiohttp.ClientPayloadError):
            await response.read()
