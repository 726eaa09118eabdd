"""One handler path for the bare path (the default run) and a declared run: TRL's whole contract,
call by call, through ``""`` and through ``/runs/a`` on one proxy, with what differs by run
checked in both (the names the replicas hold, the share ``/server_info`` reports, what a pause
does). A branch left at one use for the bare path shows here as the two scopes disagreeing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from proxy.runs.names import scoped
from tests.support.adapters import write_adapter
from tests.support.calls import listed, load_body, post
from tests.support.fleet import Stack, run_stack

MAX_LORAS = 6  # the simulated replicas' (run "a" weighs 1 of 3: its share is 2)


async def get(stack: Stack, path: str) -> tuple[int, Any]:
    async with stack.session.get(stack.proxy_url + path) as response:
        return response.status, orjson.loads(await response.read())


@pytest.mark.parametrize("prefix", ["", "/runs/a"], ids=["default", "declared"])
async def test_trl_s_contract_is_served_alike_in_both_scopes(tmp_path: Path, prefix: str) -> None:
    declared = prefix != ""
    async with run_stack(2, runs="a,b=2") as stack:
        assert (await get(stack, prefix + "/health"))[0] == 200
        status, info = await get(stack, prefix + "/server_info?config_format=json")
        assert status == 200
        share = info["vllm_config"]["lora_config"]["max_loras"]
        assert share == (2 if declared else MAX_LORAS)
        assert info["vllm_config"]["parallel_config"]["data_parallel_size"] == 1
        status, body, _ = await post(stack, prefix + "/pause?mode=keep", b"")
        paused = orjson.loads(body)
        assert status == 200 and paused["status"] == "paused"
        assert paused.get("run") == ("a" if declared else None)  # a run's own gate, or the fleet

        path = write_adapter(tmp_path, "trl-policy-v1")
        status, body, _ = await post(
            stack, prefix + "/v1/load_lora_adapter", load_body("trl-policy-v1", path)
        )
        assert (status, body) == (200, b"Success: LoRA adapter 'trl-policy-v1' added successfully.")
        held = scoped("a", "trl-policy-v1") if declared else "trl-policy-v1"
        for i in range(2):
            assert held in await listed(stack, i)
        status, _, _ = await post(stack, prefix + "/resume", b"")
        assert status == 200

        status, models = await get(stack, prefix + "/v1/models")
        assert status == 200 and [m["id"] for m in models["data"]] == ["sim-model", "trl-policy-v1"]
        rollout = {"model": "trl-policy-v1", "prompt": [1, 2, 3], "max_tokens": 2}
        status, body, _ = await post(stack, prefix + "/v1/completions", rollout)
        assert status == 200, body
        assert orjson.loads(body)["model"] == held  # the replica's name for it
        status, body, _ = await post(
            stack, prefix + "/v1/completions", {**rollout, "model": "trl-policy-v9"}
        )
        assert status == 404 and b"`trl-policy-v9`" in body  # in the scope's own names

        status, _, _ = await post(
            stack, prefix + "/v1/unload_lora_adapter", {"lora_name": "trl-policy-v1"}
        )
        assert status == 200
