"""Adapter push: the proxy sends each version into every replica's receiver and loads it from
there, so a lagging bucket mount no longer holds the fleet; replicas that cannot take a push
fall back to the mount, per replica, counted; all-or-nothing, rollback and 504 keep holding."""

from __future__ import annotations

import asyncio
import logging
from functools import partial
from pathlib import Path
from typing import Any

import orjson
import pytest

from adapter_receiver.wire import PREFIX
from proxy.adapters import push as push_module
from proxy.app import PROXY
from tests.integration.test_adapters import rollout
from tests.support.adapters import write_adapter
from tests.support.calls import completion, load, load_body, metrics_text, post, records
from tests.support.fleet import Sim, Stack, run_sim, run_stack
from tests.support.uploads import listing
from tests.support.waiting import eventually, wait_for

NEVER = {"faults": {"mount_lag_s": 3600}}  # the bucket mount never shows the version


def metric(text: str, name: str, **labels: str) -> float:
    for line in text.splitlines():
        if line.startswith(name) and all(f'{k}="{v}"' in line for k, v in labels.items()):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{name}{labels} not exported")


async def roots(stack: Stack, sim: Sim) -> dict[str, str]:
    async with stack.session.get(sim.url + "/v1/models") as response:
        cards = (await response.json())["data"][1:]
    return {card["id"]: card["root"] for card in cards}


def in_store(sim: Sim, path: str) -> bool:
    return Path(path).parent.parent == Path(sim.state.store_root).resolve()


async def uploads(stack: Stack, index: int) -> list[dict[str, Any]]:
    return [r for r in await records(stack, index) if r["path"].startswith(PREFIX + "/")]


async def stored(stack: Stack, sim: Sim) -> list[str]:
    return [e["name"] for e in (await listing(stack.session, sim.url))["adapters"]]


async def test_every_replica_loads_its_pushed_copy_whatever_the_mount_lag(tmp_path: Path) -> None:
    async with run_stack(sims=[NEVER] * 3) as stack:
        text = await metrics_text(stack)
        for cause in ("no_receiver", "refused", "unreachable", "unreadable"):
            assert metric(text, "rollout_proxy_adapter_push_fallbacks_total", cause=cause) == 0
        for via in ("push", "mount", "mixed"):
            assert metric(text, "rollout_proxy_adapter_fleet_sync_seconds_count", path=via) == 0
        path = write_adapter(tmp_path, "trl-policy-v1")
        status, body, _ = await load(stack, load_body("trl-policy-v1", path))
        assert status == 200, body
        for sim in stack.sims:
            assert in_store(sim, (await roots(stack, sim))["trl-policy-v1"])
        assert (await post(stack, "/v1/completions", rollout("trl-policy-v1")))[0] == 200
        text = await metrics_text(stack)
        for sim in stack.sims:
            pushed = metric(text, "rollout_proxy_adapter_push_bytes_total", replica=sim.id)
            assert pushed > sum(f.stat().st_size for f in path.iterdir())
            assert metric(text, "rollout_proxy_adapter_push_seconds_count", replica=sim.id) == 1
        assert metric(text, "rollout_proxy_adapter_fleet_sync_seconds_count", path="push") == 1
        # TRL's /v1/models still shows the path it asked for.
        async with stack.session.get(stack.proxy_url + "/v1/models") as response:
            cards = (await response.json())["data"]
        assert [c["root"] for c in cards if c["id"] == "trl-policy-v1"] == [str(path)]


async def test_each_file_is_read_once_per_push_whatever_the_number_of_replicas(
    tmp_path: Path, monkeypatch: Any
) -> None:
    reads: list[int] = []
    real = push_module._read

    def counting(handle: Any, size: int, hasher: Any) -> bytes:
        data = real(handle, size, hasher)
        reads.append(len(data))
        return data

    monkeypatch.setattr(push_module, "_read", counting)
    async with run_stack(sims=[NEVER] * 4, adapter_push_buffer=1 << 20) as stack:
        path = write_adapter(tmp_path, "trl-policy-v1")
        (path / "adapter_model.safetensors").write_bytes(bytes(range(256)) * 20_000)  # 5 MB
        assert (await load(stack, load_body("trl-policy-v1", path)))[0] == 200
    assert sum(reads) == sum(f.stat().st_size for f in path.iterdir())


async def test_replicas_without_a_receiver_load_from_the_mount_counted(tmp_path: Path) -> None:
    sims: list[dict[str, Any]] = [{}, {"adapter_receiver": False, "faults": {"mount_lag_s": 0.2}}]
    # A generous probe time (the receiver probe shares the health timeout): however busy the
    # machine, the proxy learns which replica has no receiver before the first push.
    async with run_stack(sims=sims, health_timeout=5) as stack:
        path = write_adapter(tmp_path, "trl-policy-v1")
        status, body, _ = await load(stack, load_body("trl-policy-v1", path))
        assert status == 200, body
        assert in_store(stack.sims[0], (await roots(stack, stack.sims[0]))["trl-policy-v1"])
        assert (await roots(stack, stack.sims[1]))["trl-policy-v1"] == str(path)
        async with stack.session.get(stack.proxy_url + "/proxy/status") as response:
            adapters = (await response.json())["adapters"]
        assert adapters["push"] is True
        assert adapters["receivers"] == {stack.sims[0].id: True, stack.sims[1].id: False}
        # It is not pushed to again: no upload reached it, the next version goes to the mount.
        path2 = write_adapter(tmp_path, "trl-policy-v2")
        assert (await load(stack, load_body("trl-policy-v2", path2)))[0] == 200
        assert not await uploads(stack, 1)
        text = await metrics_text(stack)
        assert metric(text, "rollout_proxy_adapter_push_fallbacks_total", cause="no_receiver") == 2
        assert metric(text, "rollout_proxy_adapter_fleet_sync_seconds_count", path="mixed") == 2


async def test_a_refused_push_falls_back_for_that_replica_only(tmp_path: Path) -> None:
    sims: list[dict[str, Any]] = [{}, {"adapter_max_bytes": 10}]
    async with run_stack(sims=sims) as stack:
        path = write_adapter(tmp_path, "trl-policy-v1")
        assert (await load(stack, load_body("trl-policy-v1", path)))[0] == 200
        assert in_store(stack.sims[0], (await roots(stack, stack.sims[0]))["trl-policy-v1"])
        assert (await roots(stack, stack.sims[1]))["trl-policy-v1"] == str(path)
        text = await metrics_text(stack)
        assert metric(text, "rollout_proxy_adapter_push_fallbacks_total", cause="refused") == 1


@pytest.mark.parametrize(
    "name",
    ["../../v1/completions", "../x", "a..b", "a#frag", "a?x=1", "v1\r\nforged", "x" * 10_000],
)
async def test_a_name_the_receivers_would_refuse_is_refused_at_the_edge(
    name: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Every adapter name from outside is held to the receivers' rule where it arrives (one
    path component: ``adapter_receiver.wire.NAME_RULE``): its load and its unload are 400,
    naming the rule, and no replica hears of it (no load, no PUT into a URL)."""
    caplog.set_level(logging.INFO, logger="proxy")
    async with run_stack(2) as stack:
        path = write_adapter(tmp_path, "plain-dir")
        for route, body in (
            ("/v1/load_lora_adapter", load_body(name, path)),
            ("/v1/unload_lora_adapter", {"lora_name": name}),
        ):
            status, answer, _ = await post(stack, route, body)
            assert status == 400, answer
            error = orjson.loads(answer)["error"]
            assert error["param"] == "lora_name" and "one path component" in error["message"]
        for index in (0, 1):
            asked = [r for r in await records(stack, index) if r["method"] == "PUT" or
                     r["path"] in ("/v1/load_lora_adapter", "/v1/unload_lora_adapter")]  # fmt: skip
            assert not asked
            assert not await stored(stack, stack.sims[index])
    # A CR/LF in a name forges no log line: names that are not printable are logged as repr.
    assert not [r for r in caplog.records if "\n" in r.getMessage() or "\r" in r.getMessage()]


async def test_only_what_an_adapter_is_made_of_is_pushed(tmp_path: Path) -> None:
    async with run_stack(2) as stack:
        path = write_adapter(tmp_path, "trl-policy-v1")
        (path / "id_rsa").write_text("-----BEGIN OPENSSH PRIVATE KEY-----\n")
        (path / "README.md").write_text("# model card\n")
        (path / "tokenizer_config.json").write_text("{}")
        assert (await load(stack, load_body("trl-policy-v1", path)))[0] == 200
        for sim in stack.sims:
            entries = (await listing(stack.session, sim.url))["adapters"]
            assert [sorted(f["name"] for f in e["files"]) for e in entries] == [
                ["adapter_config.json", "adapter_model.safetensors", "tokenizer_config.json"]
            ]
            root = Path((await roots(stack, sim))["trl-policy-v1"])
            assert in_store(sim, str(root)) and not (root / "id_rsa").exists()


async def test_a_refused_version_is_rolled_back_and_every_pushed_copy_deleted(
    tmp_path: Path,
) -> None:
    # Rank 16 is above the third replica's --max-lora-rank: it refuses the adapter (400).
    sims: list[dict[str, Any]] = [{"max_lora_rank": 16}, {"max_lora_rank": 16}, {}]
    async with run_stack(sims=sims) as stack:
        path = write_adapter(tmp_path, "trl-policy-v1", rank=16)
        status, body, _ = await load(stack, load_body("trl-policy-v1", path))
        assert status == 400, body
        assert "rolled back on 2" in orjson.loads(body)["error"]["message"]
        for i, sim in enumerate(stack.sims):
            assert await uploads(stack, i), f"nothing was pushed to {sim.id}"
            assert "trl-policy-v1" not in await roots(stack, sim)
            await eventually(partial(_empty, stack, sim), what=f"{sim.id}'s pushed copy deleted")


async def test_a_refused_in_place_replace_rolls_back_to_the_served_files_not_to_nothing(
    tmp_path: Path,
) -> None:
    sims: list[dict[str, Any]] = [{"max_lora_rank": 16}, {}]  # the second refuses rank 16
    async with run_stack(sims=sims) as stack:
        served = write_adapter(tmp_path / "a", "trl-policy-v2")
        assert (await load(stack, load_body("trl-policy-v2", served)))[0] == 200
        before = [(await roots(stack, sim))["trl-policy-v2"] for sim in stack.sims]
        bigger = write_adapter(tmp_path / "b", "trl-policy-v2", rank=16)
        status, body, _ = await load(stack, load_body("trl-policy-v2", bigger))
        assert status == 400, body
        # v2 is still served everywhere, from the files it was served from.
        assert [(await roots(stack, sim))["trl-policy-v2"] for sim in stack.sims] == before
        async with stack.session.get(stack.proxy_url + "/v1/models") as response:
            models = {c["id"]: c["root"] for c in (await response.json())["data"][1:]}
        assert models["trl-policy-v2"] == str(served)
        for key in range(8):  # routed by key over both replicas
            code, answer, _ = await post(
                stack, "/v1/completions", completion("trl-policy-v2", prompt=[key, 1, 2, 3])
            )
            assert code == 200, answer


async def _empty(stack: Stack, sim: Sim) -> bool:
    return not await stored(stack, sim)


async def test_a_mount_that_never_shows_the_version_is_still_504_never_404(
    tmp_path: Path,
) -> None:
    sims: list[dict[str, Any]] = [{}, {"adapter_receiver": False, **NEVER}]
    async with run_stack(sims=sims, adapter_load_deadline=0.3) as stack:
        path = write_adapter(tmp_path, "trl-policy-v1")
        status, body, _ = await load(stack, load_body("trl-policy-v1", path))
        assert status == 504, body
        assert "(rolled back on 1)" in orjson.loads(body)["error"]["message"]
        assert await uploads(stack, 0)
        await eventually(lambda: _empty(stack, stack.sims[0]), what="the pushed copy deleted")


async def test_the_window_is_pushed_into_a_restarted_replica_before_traffic(
    tmp_path: Path,
) -> None:
    async with run_stack(sims=[NEVER, NEVER], health_interval=0.05) as stack:
        for n in (1, 2):
            path = write_adapter(tmp_path, f"trl-policy-v{n}")
            assert (await load(stack, load_body(f"trl-policy-v{n}", path)))[0] == 200
        victim = stack.sims[1]
        port = victim.port
        await victim.stop()
        await wait_for(lambda: len(stack.pool.routable()) == 1, what="ejection")
        async with run_sim(port=port, **NEVER) as back:  # a fresh, empty store
            await wait_for(lambda: len(stack.pool.routable()) == 2, what="readmission")
            got = await roots(stack, back)
            assert set(got) == {"trl-policy-v1", "trl-policy-v2"}
            assert all(in_store(back, root) for root in got.values())
            for _ in range(8):
                assert (await post(stack, "/v1/completions", rollout("trl-policy-v2")))[0] == 200


async def test_the_watcher_preload_is_pushed_too(tmp_path: Path) -> None:
    adapters = tmp_path / ".vllm_lora"
    adapters.mkdir()
    async with run_stack(sims=[NEVER] * 2, adapters_dir=str(adapters), watch_interval=0.05) as s:
        write_adapter(adapters, "trl-policy-v1")

        async def preloaded() -> bool:
            got = [await roots(s, sim) for sim in s.sims]
            return all("trl-policy-v1" in r for r in got)

        await eventually(preloaded, what="the watcher's push and load")
        for sim in s.sims:
            assert in_store(sim, (await roots(s, sim))["trl-policy-v1"])


async def test_no_adapter_push_leaves_the_receivers_alone(tmp_path: Path) -> None:
    sims: list[dict[str, Any]] = [{"faults": {"mount_lag_s": 0.2}}] * 2
    async with run_stack(sims=sims, adapter_push=False) as stack:
        path = write_adapter(tmp_path, "trl-policy-v1")
        assert (await load(stack, load_body("trl-policy-v1", path)))[0] == 200
        for i, sim in enumerate(stack.sims):
            assert (await roots(stack, sim))["trl-policy-v1"] == str(path)
            assert not await uploads(stack, i)


async def test_window_moves_and_unloads_drop_the_copies(tmp_path: Path) -> None:
    async with run_stack(sims=[NEVER] * 2, adapter_window=2) as stack:
        for n in (1, 2, 3):
            path = write_adapter(tmp_path, f"trl-policy-v{n}")
            assert (await load(stack, load_body(f"trl-policy-v{n}", path)))[0] == 200
        for sim in stack.sims:

            async def two_left(sim: Sim = sim) -> bool:
                return sorted(await stored(stack, sim)) == ["trl-policy-v2", "trl-policy-v3"]

            await eventually(two_left, what="v1's copies dropped when the window moved on")
        status, _, _ = await post(stack, "/v1/unload_lora_adapter", {"lora_name": "trl-policy-v2"})
        assert status == 200
        for sim in stack.sims:
            await eventually(partial(_only_v3, stack, sim), what="v2's copies dropped on unload")
        assert stack.proxy_app[PROXY].adapters.service.registry.versions.keys() == {"trl-policy-v3"}
        assert not await asyncio.to_thread(stack.proxy_app[PROXY].adapters.receiver.store.entries)


async def _only_v3(stack: Stack, sim: Sim) -> bool:
    return await stored(stack, sim) == ["trl-policy-v3"]


async def test_a_replica_that_stops_taking_bytes_is_cut_off_and_loads_from_the_mount(
    tmp_path: Path,
) -> None:
    # The stall bound is well above what a busy machine may delay a healthy upload by. Health
    # does not eject the frozen replica meanwhile (it would give up the push at once: a replica
    # that left routing holds no load, ``tests/reliability/test_hung_load.py``).
    settings: dict[str, Any] = {
        "adapter_push_stall": 2.0,
        "adapter_push_buffer": 1 << 20,
        "health_timeout": 60.0,
    }
    async with run_stack(2, relays=True, **settings) as stack:
        path = write_adapter(tmp_path, "trl-policy-v1")
        (path / "adapter_model.safetensors").write_bytes(b"\1" * (16 << 20))  # past the buffers
        stack.relays[1].freeze()  # replica 1 accepts the upload, then takes nothing
        loading = asyncio.create_task(load(stack, load_body("trl-policy-v1", path)))

        async def cut_off() -> bool:
            text = await metrics_text(stack)
            name = "rollout_proxy_adapter_push_fallbacks_total"
            return metric(text, name, cause="unreachable") == 1

        await eventually(cut_off, timeout=20, what="the stalled push cut off")
        # Replica 0 was not held back by it: its copy is loaded already.
        await eventually(
            lambda: _loaded_from_store(stack, stack.sims[0]), what="replica 0 loaded its copy"
        )
        stack.relays[1].thaw()
        status, body, _ = await loading
        assert status == 200, body
        assert (await roots(stack, stack.sims[1]))["trl-policy-v1"] == str(path)


async def _loaded_from_store(stack: Stack, sim: Sim) -> bool:
    root = (await roots(stack, sim)).get("trl-policy-v1")
    return root is not None and in_store(sim, root)


async def test_a_proxy_without_a_mount_downloads_each_bucket_version_once_and_pushes_it(
    tmp_path: Path, monkeypatch: Any
) -> None:
    """--adapters-bucket: the proxy cannot read the replicas' mount path; it downloads the
    version through the Hub API (here a copy from the stand-in's directory) and pushes that."""
    from proxy.adapters.sources import BucketSource
    from tests.support.hub import build_hub_app
    from tests.support.servers import serve

    bucket = tmp_path / "hub" / "team" / "rollouts"
    (bucket / "run1" / ".vllm_lora").mkdir(parents=True)
    downloads: list[str] = []

    def download(self: BucketSource, api: Any, pairs: list[tuple[Any, Path]]) -> None:
        for item, local in pairs:
            downloads.append(item.path)
            local.write_bytes((bucket / item.path).read_bytes())

    monkeypatch.setattr(BucketSource, "_download", download)
    settings: dict[str, Any] = {
        "adapters_bucket": "team/rollouts/run1/.vllm_lora",
        "adapters_mount": "/nonexistent-mount",  # neither the proxy nor a replica sees it
        "watch_interval": 0.05,
    }
    async with (
        serve(build_hub_app(tmp_path / "hub")) as hub_url,
        run_stack(2, hub_endpoint=hub_url, **settings) as stack,
    ):
        write_adapter(bucket / "run1" / ".vllm_lora", "trl-policy-v1")
        mount_path = "/nonexistent-mount/run1/.vllm_lora/trl-policy-v1"

        async def everywhere() -> bool:
            return all([
                "trl-policy-v1" in await roots(stack, sim) for sim in stack.sims
            ])  # fmt: skip

        await eventually(everywhere, what="the downloaded version pushed and loaded")
        # TRL's own load (the mount path) finds it done, and nothing is fetched again.
        body = {"lora_name": "trl-policy-v1", "lora_path": mount_path}
        assert (await load(stack, body))[0] == 200
        for sim in stack.sims:
            assert in_store(sim, (await roots(stack, sim))["trl-policy-v1"])
    assert sorted(downloads) == [
        "run1/.vllm_lora/trl-policy-v1/adapter_config.json",
        "run1/.vllm_lora/trl-policy-v1/adapter_model.safetensors",
    ]


async def test_a_bug_in_the_reader_is_reported_and_the_replicas_load_from_the_mount(
    tmp_path: Path, monkeypatch: Any
) -> None:
    def broken(directory: Path) -> Any:
        raise RuntimeError("a bug in the push reader")

    monkeypatch.setattr(push_module, "list_files", broken)
    async with run_stack(2) as stack:
        path = write_adapter(tmp_path, "trl-policy-v1")
        assert (await load(stack, load_body("trl-policy-v1", path)))[0] == 200
        for sim in stack.sims:
            assert (await roots(stack, sim))["trl-policy-v1"] == str(path)
        text = await metrics_text(stack)
        assert metric(text, "rollout_proxy_background_errors_total", task="adapters") == 1
        assert metric(text, "rollout_proxy_adapter_push_fallbacks_total", cause="unreadable") == 2
