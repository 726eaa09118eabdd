"""The waste the proxy sees: rollouts answered after their adapter version left the window.

A sync as TRL makes it (pause, load the new version, resume, unload the oldest) while rollouts
of the oldest version are still generating: they are answered (the replica finishes them) but
TRL drops them as too stale, so the proxy counts them, per run, from its start (at zero).
"""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any

from tests.support.adapters import write_adapter
from tests.support.calls import load, load_body, post
from tests.support.fleet import Stack, run_stack, wait_for

OLD, NEW = "trl-policy-v1", "trl-policy-v2"
SLOW = 20  # tokens of each old rollout: 1 s at 0.05 s a token, the unload lands in them
FAST = 4


def rollout(model: str, tokens: int) -> dict[str, Any]:
    return {"model": model, "prompt": [9, 8, 7, 6], "max_tokens": tokens, "return_token_ids": True}


async def counter(stack: Stack, name: str, run: str = "") -> float:
    async with stack.session.get(stack.proxy_url + "/metrics") as response:
        page = await response.text()
    found = re.search(rf'^rollout_proxy_{name}_total{{run="{run}"}} (\S+)$', page, re.M)
    assert found is not None, f"rollout_proxy_{name}_total{{run={run!r}}} is not exported"
    return float(found[1])


async def test_rollouts_answered_after_their_version_left_the_window_are_counted_stale(
    tmp_path: Path,
) -> None:
    async with run_stack(2, sim={"gen_token_s": 0.05}, runs="other") as stack:
        for name in ("rollouts", "rollout_tokens", "stale_rollouts", "stale_tokens"):
            assert await counter(stack, name) == 0  # exported from the start
            assert await counter(stack, name, "other") == 0  # and for a declared run
        for name in (OLD, NEW):
            status, body, _ = await load(stack, load_body(name, write_adapter(tmp_path, name)))
            assert status == 200, body
        old = [asyncio.create_task(post(stack, "/v1/completions", rollout(OLD, SLOW)))
               for _ in range(6)]  # fmt: skip
        await wait_for(lambda: stack.pool.total_inflight() == 6, what="old rollouts in flight")
        assert (await post(stack, "/pause", b""))[0] == 200
        assert (await post(stack, "/resume", b""))[0] == 200
        status, body, _ = await post(stack, "/v1/unload_lora_adapter", {"lora_name": OLD})
        assert status == 200, body
        assert [s for s, _, _ in await asyncio.gather(*old)] == [200] * 6
        fresh = [await post(stack, "/v1/completions", rollout(NEW, FAST)) for _ in range(4)]
        assert [s for s, _, _ in fresh] == [200] * 4
        assert await counter(stack, "rollouts") == 10
        assert await counter(stack, "rollout_tokens") == 6 * SLOW + 4 * FAST
        assert await counter(stack, "stale_rollouts") == 6
        assert await counter(stack, "stale_tokens") == 6 * SLOW
        assert await counter(stack, "stale_rollouts", "other") == 0
        async with stack.session.get(stack.proxy_url + "/proxy/status") as response:
            bare = (await response.json())["rollouts"][""]
        assert bare["stale"] == 6
        assert bare["stale_share"] == 6 * SLOW / (6 * SLOW + 4 * FAST)
