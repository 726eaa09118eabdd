"""The remote-proxy topology: the trainer's relay pushes each version into the remote proxy's
receiver before forwarding TRL's load, and the remote proxy pushes on to the replicas, so a
proxy running as a job of its own has the bytes without any mount."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp

from proxy.app import PROXY, build_app, serve
from proxy.config import Settings
from tests.integration.test_push import in_store
from tests.support.adapters import write_adapter
from tests.support.calls import completion, load_body
from tests.support.fleet import FAST_HEALTH, Sim, run_sim
from tests.support.uploads import listing, put, upload_body
from tests.support.waiting import eventually, wait_for

KEY = "remote-proxy-key"
NEVER: dict[str, Any] = {"faults": {"mount_lag_s": 3600}}


@dataclass
class Topology:
    sims: list[Sim]
    remote: str
    remote_app: Any
    relay: str
    relay_app: Any
    session: aiohttp.ClientSession


@asynccontextmanager
async def topology(tmp_path: Path, *, relay_forwards: bool = False) -> AsyncIterator[Topology]:
    async with AsyncExitStack() as exits:
        sims = [await exits.enter_async_context(run_sim(**NEVER)) for _ in range(2)]
        remote_app = build_app(
            Settings.model_validate(
                {"replicas": [s.url for s in sims], "api_key": KEY, **FAST_HEALTH}
            )
        )
        remote = await exits.enter_async_context(serve(remote_app))
        given = {"replicas": [remote], "upstream_token": KEY, "forward_pause": relay_forwards}
        relay_app = build_app(Settings.model_validate({**given, **FAST_HEALTH}))
        relay = await exits.enter_async_context(serve(relay_app))
        session = await exits.enter_async_context(aiohttp.ClientSession())
        await wait_for(
            lambda: len(remote_app[PROXY].fleet.pool.routable()) == 2, what="remote routable"
        )
        await wait_for(
            lambda: len(relay_app[PROXY].fleet.pool.routable()) == 1, what="relay routable"
        )
        yield Topology(sims, remote, remote_app, relay, relay_app, session)


async def _models(session: aiohttp.ClientSession, url: str, **headers: str) -> dict[str, str]:
    async with session.get(url + "/v1/models", headers=headers) as response:
        assert response.status == 200
        return {c["id"]: c["root"] for c in (await response.json())["data"][1:]}


async def test_a_version_travels_trainer_relay_remote_proxy_replicas_by_push(
    tmp_path: Path,
) -> None:
    path = write_adapter(tmp_path / "run" / ".vllm_lora", "trl-policy-v1")
    async with topology(tmp_path) as t:
        async with t.session.post(
            t.relay + "/v1/load_lora_adapter", json=load_body("trl-policy-v1", path)
        ) as response:
            assert response.status == 200, await response.text()
        # The remote proxy holds the upload, with where the bucket mount shows it.
        (entry,) = await asyncio.to_thread(t.remote_app[PROXY].adapters.receiver.store.entries)
        assert (entry.name, entry.origin) == ("trl-policy-v1", str(path))
        # Every replica loaded its own pushed copy (their mount never showed it).
        for sim in t.sims:
            root = (await _models(t.session, sim.url))["trl-policy-v1"]
            assert in_store(sim, root)
        # Each proxy shows what its client asked for.
        assert (await _models(t.session, t.relay))["trl-policy-v1"] == str(path)
        auth = {"Authorization": f"Bearer {KEY}"}
        assert (await _models(t.session, t.remote, **auth))["trl-policy-v1"] == str(entry.path)
        async with t.session.post(
            t.relay + "/v1/completions", json=completion("trl-policy-v1")
        ) as response:
            assert response.status == 200
        # TRL's unload drops every copy: the remote proxy's and the replicas'.
        async with t.session.post(
            t.relay + "/v1/unload_lora_adapter", json={"lora_name": "trl-policy-v1"}
        ) as response:
            assert response.status == 200
        # Answered at once by each proxy, carried out behind: the relay's, then the remote's.
        await t.relay_app[PROXY].adapters.service.settled()
        await t.remote_app[PROXY].adapters.service.settled()
        assert not await asyncio.to_thread(t.remote_app[PROXY].adapters.receiver.store.entries)
        for sim in t.sims:

            async def dropped(sim: Sim = sim) -> bool:
                return not (await listing(t.session, sim.url))["adapters"]

            await eventually(dropped, what=f"{sim.id}'s copy dropped")


async def test_the_remote_proxys_receiver_demands_its_api_key(tmp_path: Path) -> None:
    body = upload_body({"adapter_config.json": b"{}"})
    async with topology(tmp_path) as t:
        assert (await put(t.session, t.remote, "trl-policy-v1", body))[0] == 401
        status, _ = await put(
            t.session, t.remote, "trl-policy-v1", body, Authorization=f"Bearer {KEY}"
        )
        assert status == 201


async def test_a_relay_forwarding_the_pause_to_a_proxy_counts_nothing_frozen(
    tmp_path: Path,
) -> None:
    """A relay with ``--forward-pause`` hands TRL's pause to the remote proxy, which answers it
    (its replicas keep generating): both keep the window, neither counts it frozen."""
    async with topology(tmp_path, relay_forwards=True) as t:
        for path in ("/pause?mode=keep", "/resume"):
            async with t.session.post(t.relay + path) as response:
                assert response.status == 200, await response.text()
        assert not any(sim.state.engine.gate.paused for sim in t.sims)
        assert not [r for sim in t.sims for r in sim.state.records if r.path == "/pause"]
        remote = t.remote_app[PROXY].fleet.sync
        relay = t.relay_app[PROXY].fleet.sync
        assert (remote.syncs, remote.paused_seconds()) == (1, 0.0)
        assert (relay.syncs, relay.paused_seconds()) == (1, 0.0)  # nothing froze downstream


async def test_the_relay_answers_trls_pause_itself(tmp_path: Path) -> None:
    async with topology(tmp_path) as t:
        for path in ("/pause?mode=keep", "/resume"):
            async with t.session.post(t.relay + path) as response:
                assert response.status == 200, await response.text()
        assert (t.relay_app[PROXY].fleet.sync.syncs, t.remote_app[PROXY].fleet.sync.syncs) == (1, 0)
        assert not any(sim.state.engine.gate.paused for sim in t.sims)
