"""Fixtures of the contract suite: ``replica`` is the server under test (see ``support``);
``http`` and ``sim_server`` come from ``tests/conftest.py``."""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from replica_entry.sim import SimSettings, build_sim_app
from tests.contract.support import EXTERNAL_URL, Replica
from tests.support.servers import serve


@pytest.fixture
async def replica(tmp_path: Path) -> AsyncIterator[Replica]:
    if EXTERNAL_URL is None:
        settings = SimSettings()
        async with serve(build_sim_app(settings)) as url, aiohttp.ClientSession() as session:
            yield Replica(
                url=url,
                session=session,
                model=settings.model,
                block_size=settings.block_size,
                max_model_len=settings.max_model_len,
                max_loras=settings.max_loras,
                adapter_root=tmp_path,
            )
        return
    async with _external(tmp_path) as replica_:
        yield replica_


@asynccontextmanager
async def _external(tmp_path: Path) -> AsyncIterator[Replica]:
    url = (EXTERNAL_URL or "").rstrip("/")
    key = os.environ.get("CONTRACT_REPLICA_API_KEY")
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    root = Path(os.environ.get("CONTRACT_ADAPTER_DIR", str(tmp_path)))
    async with aiohttp.ClientSession(headers=headers) as session:
        models = await _get_json(session, f"{url}/v1/models")
        info = await _get_json(session, f"{url}/server_info?config_format=json")
        config = info["vllm_config"]
        replica_ = Replica(
            url=url,
            session=session,
            model=models["data"][0]["id"],
            block_size=config["cache_config"]["block_size"],
            max_model_len=models["data"][0]["max_model_len"],
            max_loras=config["lora_config"]["max_loras"],
            adapter_root=root,
        )
        try:
            yield replica_
        finally:
            # A long-lived server must not keep this test's adapters.
            for name in list(replica_.loaded):
                await replica_.unload(name)


async def _get_json(session: aiohttp.ClientSession, url: str) -> Any:
    async with session.get(url) as response:
        assert response.status == 200, url
        return json.loads(await response.read())
