"""The adapter mount lag: a directory is visible only ``mount_lag_s`` after it was written."""

from __future__ import annotations

import os
import time
from pathlib import Path

import aiohttp

from replica_entry.sim import Faults
from tests.support.adapters import write_adapter
from tests.support.clock import FakeClock
from tests.support.fleet import SimServer


async def _load(http: aiohttp.ClientSession, url: str, name: str, path: Path) -> tuple[int, str]:
    body = {"lora_name": name, "lora_path": str(path), "load_inplace": False}
    async with http.post(url + "/v1/load_lora_adapter", json=body) as response:
        return response.status, await response.text()


async def test_a_fresh_adapter_is_not_found_until_the_mount_catches_up(
    http: aiohttp.ClientSession, sim_server: SimServer, tmp_path: Path
) -> None:
    clock = FakeClock(start=time.time())
    path = write_adapter(tmp_path, "trl-policy-v1")
    async with sim_server(clock=clock, faults=Faults(mount_lag_s=10.0)) as (url, _):
        status, text = await _load(http, url, "trl-policy-v1", path)
        assert status == 404
        assert "No adapter found" in text
        clock.now += 11.0
        assert await _load(http, url, "trl-policy-v1", path) == (
            200,
            "Success: LoRA adapter 'trl-policy-v1' added successfully.",
        )


async def test_weights_that_lag_behind_the_config_fail_without_no_adapter_found(
    http: aiohttp.ClientSession, sim_server: SimServer, tmp_path: Path
) -> None:
    clock = FakeClock(start=time.time())
    path = write_adapter(tmp_path, "trl-policy-v2")
    weights = path / "adapter_model.safetensors"
    os.utime(weights, (clock.now + 100.0, clock.now + 100.0))
    async with sim_server(clock=clock, faults=Faults(mount_lag_s=10.0)) as (url, _):
        clock.now += 11.0
        status, text = await _load(http, url, "trl-policy-v2", path)
        assert status == 400
        assert "doesn't contain tensors" in text
        assert "No adapter found" not in text
        clock.now += 100.0
        assert (await _load(http, url, "trl-policy-v2", path))[0] == 200


async def test_mount_lag_can_be_set_at_run_time(
    http: aiohttp.ClientSession, sim_server: SimServer, tmp_path: Path
) -> None:
    clock = FakeClock(start=time.time())
    path = write_adapter(tmp_path, "trl-policy-v3")
    async with sim_server(clock=clock) as (url, _):
        async with http.post(url + "/sim/faults", json={"mount_lag_s": 30.0}):
            pass
        assert (await _load(http, url, "trl-policy-v3", path))[0] == 404


async def test_a_later_version_is_served_at_its_own_speed(
    http: aiohttp.ClientSession, sim_server: SimServer, tmp_path: Path
) -> None:
    """Completions that shrink as the run trains: v2 and later decode at no cost here, while
    the base model's 8 tokens would take 80 s (the test's timeout would stop it)."""
    path = write_adapter(tmp_path, "trl-policy-v2")
    settings = {"gen_token_s": 10.0, "later_version": 2, "later_gen_token_s": 0.0}
    async with sim_server(**settings) as (url, _):
        assert (await _load(http, url, "trl-policy-v2", path))[0] == 200
        body = {"model": "trl-policy-v2", "prompt": [1, 2, 3], "max_tokens": 8}
        async with http.post(url + "/v1/completions", json=body) as response:
            answer = await response.json()
        assert response.status == 200
        assert answer["usage"]["completion_tokens"] == 8
