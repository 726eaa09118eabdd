"""Request records and counters of the simulated replica: the log itself (bounded, list-like,
counting cancellations and drops) and what ``/sim/requests`` shows."""

from __future__ import annotations

import asyncio
from contextlib import suppress
from typing import Any

import aiohttp

from replica_entry.sim import SIM_STATE
from replica_entry.sim.records import RequestLog
from tests.support.fleet import SimServer
from tests.support.waiting import wait_for


def test_the_log_keeps_the_newest_records_up_to_its_bound() -> None:
    log = RequestLog(maxlen=3)
    for path in ("/a", "/b", "/c", "/d"):
        log.open("GET", path, "", None, None)
    assert [r.path for r in log] == ["/b", "/c", "/d"]
    assert (len(log), log[-1].seq, log.total) == (3, 4, 4)


def test_cancellations_and_drops_are_counted_once() -> None:
    log = RequestLog()
    record = log.open("POST", "/v1/completions", "", True, "key")
    log.mark_cancelled(record)
    log.mark_cancelled(record)
    log.mark_dropped(log.open("POST", "/v1/completions", "", True, None))
    assert (log.cancelled, log.dropped) == (1, 1)
    assert log.as_json()[0]["routing_key"] == "key"
    log.clear()
    assert (len(log), log.total, log.cancelled, log.dropped) == (0, 0, 0, 0)


async def _records(http: aiohttp.ClientSession, url: str) -> dict[str, Any]:
    async with http.get(url + "/sim/requests") as response:
        result: dict[str, Any] = await response.json()
        return result


async def test_a_generation_request_is_recorded(
    http: aiohttp.ClientSession, sim_server: SimServer
) -> None:
    body = {"model": "sim-model", "prompt": list(range(40)), "max_tokens": 2}
    headers = {"X-Routing-Key": "group-7"}
    async with sim_server() as (url, _):
        for _ in range(2):
            async with http.post(url + "/v1/completions?x=1", json=body, headers=headers) as r:
                assert r.status == 200
        records = (await _records(http, url))["records"]
    assert records[-1] == {
        "seq": 2,
        "method": "POST",
        "path": "/v1/completions",
        "query": "x=1",
        "authorized": None,
        "routing_key": "group-7",
        "model": "sim-model",
        "status": 200,
        "cancelled": False,
        "dropped": False,
        "prompt_tokens": 40,
        "cached_tokens": 32,
        "top_logprobs": None,
    }


async def test_errors_and_admin_calls_are_recorded_but_sim_routes_are_not(
    http: aiohttp.ClientSession, sim_server: SimServer
) -> None:
    async with sim_server() as (url, _):
        async with http.post(url + "/v1/completions", json={"model": "x", "prompt": [1]}):
            pass
        async with http.post(url + "/v1/unload_lora_adapter", json={"lora_name": "gone"}):
            pass
        async with http.get(url + "/sim/faults"):
            pass
        result = await _records(http, url)
    assert [(r["path"], r["status"], r["model"]) for r in result["records"]] == [
        ("/v1/completions", 404, "x"),
        ("/v1/unload_lora_adapter", 404, "gone"),
    ]
    assert result["counters"]["total"] == 2


async def test_clear_forgets_records_and_counters(
    http: aiohttp.ClientSession, sim_server: SimServer
) -> None:
    async with sim_server() as (url, _):
        async with http.get(url + "/health"):
            pass
        async with http.post(url + "/sim/requests/clear") as response:
            assert (await response.json())["counters"]["total"] == 0
        result = await _records(http, url)
    assert result["records"] == []
    assert result["counters"]["max_in_flight"] == 0


async def test_counters_show_the_peak_in_flight(
    http: aiohttp.ClientSession, sim_server: SimServer
) -> None:
    async def complete() -> None:
        body = {"prompt": [1, 2, 3], "max_tokens": 1}
        async with http.post(url + "/v1/completions", json=body) as response:
            assert response.status == 200

    async with sim_server() as (url, app):
        engine = app[SIM_STATE].engine
        async with http.post(url + "/pause?mode=keep"):
            pass
        tasks = [asyncio.create_task(complete()) for _ in range(4)]
        await wait_for(lambda: engine.in_flight == 4)
        async with http.post(url + "/resume"):
            pass
        await asyncio.gather(*tasks)
        counters = (await _records(http, url))["counters"]
    assert counters["max_in_flight"] == 4
    assert counters["in_flight"] == counters["running"] == counters["waiting"] == 0


async def test_a_client_that_leaves_mid_request_is_recorded_as_cancelled(
    http: aiohttp.ClientSession, sim_server: SimServer
) -> None:
    body = {"prompt": [1, 2, 3], "max_tokens": 3000}
    async with sim_server(gen_token_s=0.01) as (url, app):
        state = app[SIM_STATE]
        task = asyncio.create_task(http.post(url + "/v1/completions", json=body))
        await wait_for(lambda: state.engine.running == 1)
        task.cancel()
        with suppress(asyncio.CancelledError):
            await task
        await wait_for(lambda: state.records.cancelled == 1)
        record = state.records[-1]
        assert record.cancelled
        assert record.status is None
        assert state.engine.running == state.engine.in_flight == 0


async def test_a_stream_reader_that_leaves_is_recorded_as_cancelled(
    http: aiohttp.ClientSession, sim_server: SimServer
) -> None:
    body = {"prompt": [1, 2, 3], "max_tokens": 3000, "stream": True}
    async with sim_server(gen_token_s=0.005) as (url, app):
        state = app[SIM_STATE]
        async with http.post(url + "/v1/completions", json=body) as response:
            await response.content.readuntil(b"\n\n")
            response.close()
        await wait_for(lambda: state.records.cancelled == 1)
        assert state.engine.running == 0
