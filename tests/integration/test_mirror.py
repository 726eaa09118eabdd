"""The adapter saved to local disk: a real proxy on loopback with ``--adapters-local`` and
``--adapters-mirror``, one simulated replica with a receiver and one without. A version TRL
writes into the local directory is pushed from there; the replica without a receiver loads the
bucket copy, and only once the mirror has landed it; every version lands in the mirror
directory complete, none skipped, and is pruned there after TRL deletes it locally."""

from __future__ import annotations

import asyncio
import shutil
import threading
from pathlib import Path
from typing import Any

from proxy.app import PROXY
from tests.integration.test_push import in_store, metric, roots
from tests.support.adapters import write_adapter
from tests.support.calls import load, load_body, metrics_text, records
from tests.support.fleet import Stack, run_stack
from tests.support.waiting import wait_for

PLAIN = {"adapter_receiver": False}  # loads from the path it is given (the bucket mount)


async def plain_loads(stack: Stack) -> list[int]:
    """The statuses of the load calls the replica without a receiver has had."""
    return [r["status"] for r in await records(stack, 1) if r["path"] == "/v1/load_lora_adapter"]


def settings(tmp_path: Path) -> tuple[Path, Path, dict[str, Any]]:
    local, bucket = tmp_path / "trainer-disk", tmp_path / "bucket" / "run" / ".vllm_lora"
    local.mkdir()
    given = {"adapters_dir": str(local), "adapters_local": str(local),
             "adapters_mirror": str(bucket), "watch_interval": "0.05"}  # fmt: skip
    return local, bucket, given


async def test_pushed_from_local_and_the_plain_replica_waits_for_the_mirror(
    tmp_path: Path,
) -> None:
    local, bucket, given = settings(tmp_path)
    async with run_stack(sims=[{}, PLAIN], **given) as stack:
        mirror = stack.proxy_app[PROXY].adapters.mirror
        assert mirror is not None
        entered, release = threading.Event(), threading.Event()
        copy = mirror.copy_file

        def held(src: str, dst: str) -> object:
            entered.set()
            assert release.wait(10)
            return copy(src, dst)

        mirror.copy_file = held
        path = write_adapter(local, "trl-policy-v1")
        loading = asyncio.create_task(load(stack, load_body("trl-policy-v1", path)))
        await wait_for(entered.is_set, what="the mirror's copy to start")
        receiver, plain = stack.sims
        await wait_for(lambda: "trl-policy-v1" in receiver.state.adapters, what="the push")
        assert in_store(receiver, (await roots(stack, receiver))["trl-policy-v1"])
        assert await plain_loads(stack) == [] and not loading.done()  # it waits for the bucket
        assert not (bucket / "trl-policy-v1").exists()
        release.set()
        status, body, _ = await loading
        assert status == 200, body
        assert (await roots(stack, plain))["trl-policy-v1"] == str(bucket / "trl-policy-v1")
        assert await plain_loads(stack) == [200]  # once, after it landed: no retry
        # TRL's /v1/models shows the path TRL saved to.
        async with stack.session.get(stack.proxy_url + "/v1/models") as response:
            cards = (await response.json())["data"]
        assert [c["root"] for c in cards if c["id"] == "trl-policy-v1"] == [str(path)]
        text = await metrics_text(stack)
        assert metric(text, "rollout_proxy_adapter_mirror_seconds_count") == 1
        assert metric(text, "rollout_proxy_adapter_versions", kind="mirroring") == 0


async def test_every_version_lands_complete_in_order_and_is_pruned_after_trl_deletes_it(
    tmp_path: Path,
) -> None:
    local, bucket, given = settings(tmp_path)
    async with run_stack(sims=[{}, PLAIN], **given) as stack:
        originals = {}
        for n in range(1, 7):  # TRL's sync: save, load (answered once every replica has it)
            name = f"trl-policy-v{n}"
            path = write_adapter(local, name)
            originals[name] = {f.name: f.read_bytes() for f in path.iterdir()}
            status, body, _ = await load(stack, load_body(name, path))
            assert status == 200, body
            assert {f.name: f.read_bytes() for f in (bucket / name).iterdir()} == originals[name]
            if n > 2:  # TRL deletes the oldest local version as it goes
                shutil.rmtree(local / f"trl-policy-v{n - 2}")
        await wait_for(
            lambda: sorted(p.name for p in bucket.iterdir()) == ["trl-policy-v5", "trl-policy-v6"],
            what="the versions TRL deleted pruned from the bucket",
        )
        text = await metrics_text(stack)
        assert metric(text, "rollout_proxy_adapter_mirror_seconds_count") == 6
        for cause in ("snapshot", "copy", "gave_up", "backlog", "prune"):
            assert metric(text, "rollout_proxy_adapter_mirror_failures_total", cause=cause) == 0
        assert not any((local / ".mirror").iterdir())
