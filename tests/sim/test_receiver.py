"""The simulated replica's receiver settings: caps, no receiver, its store, no mount lag there."""

from __future__ import annotations

import time
from pathlib import Path

import aiohttp

from adapter_receiver.store import charge
from adapter_receiver.wire import PREFIX
from replica_entry.sim import Faults
from tests.support.adapters import write_adapter
from tests.support.clock import FakeClock
from tests.support.fleet import SimServer
from tests.support.uploads import adapter_files, listing, put, upload_body

FILES = {"adapter_config.json": b'{"r": 1}', "adapter_model.safetensors": b"\0" * 4000}


async def test_the_store_cap_refuses_uploads_and_frees_space_on_unload(
    http: aiohttp.ClientSession, sim_server: SimServer
) -> None:
    room_for_two = 2 * charge(len(data) for data in FILES.values()) + 100  # as on disk
    async with sim_server(adapter_store_max_bytes=room_for_two) as (url, _):
        assert (await put(http, url, "a", upload_body(FILES)))[0] == 201
        assert (await put(http, url, "b", upload_body(FILES)))[0] == 201
        status, answer = await put(http, url, "c", upload_body(FILES))
        assert status == 507, answer
        assert "exceed" in answer["error"]["message"]
        assert {e["name"] for e in (await listing(http, url))["adapters"]} == {"a", "b"}
        async with http.post(url + "/v1/unload_lora_adapter", json={"lora_name": "a"}) as r:
            assert r.status == 404
        assert (await put(http, url, "c", upload_body(FILES)))[0] == 201


async def test_the_per_adapter_cap(http: aiohttp.ClientSession, sim_server: SimServer) -> None:
    async with sim_server(adapter_max_bytes=4000) as (url, _):
        status, answer = await put(http, url, "big", upload_body(FILES))
        assert status == 413, answer
        assert (await listing(http, url))["bytes"] == 0


async def test_without_a_receiver_its_routes_are_not_found(
    http: aiohttp.ClientSession, sim_server: SimServer
) -> None:
    async with sim_server(adapter_receiver=False) as (url, _):
        async with http.get(url + PREFIX) as response:
            assert response.status == 404
        assert (await put(http, url, "a", upload_body(FILES)))[0] == 404


async def test_a_named_store_is_emptied_when_the_replica_starts(
    http: aiohttp.ClientSession, sim_server: SimServer, tmp_path: Path
) -> None:
    store = tmp_path / "store"
    (store / "trl-policy-v1" / "0123").mkdir(parents=True)
    (store / "stale-file").write_text("left by an earlier run")
    async with sim_server(adapter_store=str(store)) as (url, _):
        # Emptied: only the store's own bookkeeping (uploads in progress, usage, its lock).
        assert sorted(p.name for p in store.iterdir()) == [".lock", ".tmp", ".usage"]
        status, entry = await put(http, url, "v2", upload_body(FILES))
        assert status == 201
        assert Path(entry["path"]).parent.parent == store.resolve()
    assert store.is_dir()  # a store the replica was given is not removed at exit


async def test_stored_adapters_load_at_once_whatever_the_mount_lag(
    http: aiohttp.ClientSession, sim_server: SimServer, tmp_path: Path
) -> None:
    clock = FakeClock(start=time.time())
    files = adapter_files(write_adapter(tmp_path, "trl-policy-v1"))
    async with sim_server(clock=clock, faults=Faults(mount_lag_s=3600.0)) as (url, _):
        status, entry = await put(http, url, "trl-policy-v1", upload_body(files))
        assert status == 201
        body = {"lora_name": "trl-policy-v1", "lora_path": entry["path"]}
        async with http.post(url + "/v1/load_lora_adapter", json=body) as response:
            assert response.status == 200, await response.text()
        body = {"lora_name": "trl-policy-v2", "lora_path": str(tmp_path / "trl-policy-v1")}
        async with http.post(url + "/v1/load_lora_adapter", json=body) as response:
            assert response.status == 404  # the mount path still lags
