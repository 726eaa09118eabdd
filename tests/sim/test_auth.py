"""A replica started with an API key guards ``/v1`` routes only, as vLLM does."""

from __future__ import annotations

import aiohttp
import pytest

from replica_entry.sim import SIM_STATE
from tests.support.fleet import SimServer

KEY = "sekret-key"


@pytest.mark.parametrize(
    "headers",
    [{}, {"Authorization": "Bearer wrong"}, {"Authorization": KEY}, {"Authorization": "Basic x"}],
)
async def test_v1_routes_need_the_bearer_key(
    http: aiohttp.ClientSession, sim_server: SimServer, headers: dict[str, str]
) -> None:
    async with sim_server(api_key=KEY) as (url, _):
        for path in ("/v1/models", "/v1/completions"):
            async with http.post(url + path, headers=headers) as response:
                assert response.status == 401
                assert await response.json() == {"error": "Unauthorized"}


@pytest.mark.parametrize("scheme", ["Bearer", "bearer"])
async def test_the_right_key_opens_v1_routes(
    http: aiohttp.ClientSession, sim_server: SimServer, scheme: str
) -> None:
    async with (
        sim_server(api_key=KEY) as (url, _),
        http.get(url + "/v1/models", headers={"Authorization": f"{scheme} {KEY}"}) as response,
    ):
        assert response.status == 200


async def test_routes_outside_v1_stay_open(
    http: aiohttp.ClientSession, sim_server: SimServer
) -> None:
    async with sim_server(api_key=KEY) as (url, _):
        for path in ("/health", "/metrics", "/server_info", "/is_paused"):
            async with http.get(url + path) as response:
                assert response.status == 200, path
        async with http.post(url + "/reset_prefix_cache") as response:
            assert response.status == 200


async def test_records_say_whether_the_key_matched_but_never_hold_it(
    http: aiohttp.ClientSession, sim_server: SimServer
) -> None:
    async with sim_server(api_key=KEY) as (url, app):
        for headers in ({}, {"Authorization": f"Bearer {KEY}"}):
            async with http.get(url + "/v1/models", headers=headers):
                pass
        async with http.get(url + "/sim/requests") as response:
            text = await response.text()
        assert [r.authorized for r in app[SIM_STATE].records] == [False, True]
    assert KEY not in text


async def test_without_a_key_authorization_is_not_recorded(
    http: aiohttp.ClientSession, sim_server: SimServer
) -> None:
    async with sim_server() as (url, app):
        async with http.get(url + "/v1/models", headers={"Authorization": "Bearer x"}):
            pass
        assert app[SIM_STATE].records[-1].authorized is None
