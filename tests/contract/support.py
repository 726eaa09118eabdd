"""Helpers of the contract suite: the replica under test and small HTTP utilities.

The suite runs against an in-process simulated replica by default, and against an external
server (a real vLLM) when ``CONTRACT_REPLICA_URL`` is set. For the external case:
``CONTRACT_REPLICA_API_KEY`` is sent as a bearer token when set, and adapter directories are
created under ``CONTRACT_ADAPTER_DIR`` (a path the server can read; default: pytest's tmp dir,
fine when the server runs on this machine). A real vLLM reads the weights, so point
``CONTRACT_ADAPTER_TEMPLATE`` at a real adapter directory for the suite to copy. The server
must run with runtime LoRA updating, ``VLLM_SERVER_DEV_MODE=1``, prefix caching and
``--enable-prompt-tokens-details``.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.support.adapters import write_adapter as write_minimal_adapter

EXTERNAL_URL = os.environ.get("CONTRACT_REPLICA_URL")
ADAPTER_TEMPLATE = os.environ.get("CONTRACT_ADAPTER_TEMPLATE")

# Marks a module or test that checks the simulation itself (faults, records, configured keys):
# it cannot run against a real vLLM.
sim_only = pytest.mark.skipif(
    EXTERNAL_URL is not None, reason="checks the simulated replica; CONTRACT_REPLICA_URL is set"
)

Json = dict[str, Any]


def write_adapter(directory: Path, *, rank: int | None = None) -> Path:
    """An adapter directory: a copy of ``CONTRACT_ADAPTER_TEMPLATE`` when set (``rank``
    overriding its config's ``r``), else the shared minimal PEFT adapter."""
    if ADAPTER_TEMPLATE is None:
        return write_minimal_adapter(directory.parent, directory.name, 1 if rank is None else rank)
    shutil.copytree(ADAPTER_TEMPLATE, directory)
    if rank is not None:
        config_path = directory / "adapter_config.json"
        config = json.loads(config_path.read_text())
        config_path.write_text(json.dumps({**config, "r": rank}))
    return directory


@dataclass
class Replica:
    """The server under test, as the suite sees it."""

    url: str
    session: aiohttp.ClientSession
    model: str
    block_size: int
    max_model_len: int
    max_loras: int
    adapter_root: Path
    loaded: set[str] = field(default_factory=set)

    def unique(self, prefix: str) -> str:
        """A name no earlier test (or run, against a long-lived server) has used."""
        return f"{prefix}-{uuid.uuid4().hex[:10]}"

    def make_adapter(self, name: str | None = None, *, rank: int | None = None) -> Path:
        path = self.adapter_root / (name or self.unique("adapter"))
        return write_adapter(path, rank=rank)

    def fresh_prompt(self, length: int) -> list[int]:
        """Token ids no earlier request has sent, so the prefix cache starts cold for them."""
        rng = random.Random(uuid.uuid4().int)
        return [rng.randrange(10, 500) for _ in range(length)]

    async def get(self, path: str) -> tuple[int, bytes]:
        async with self.session.get(self.url + path) as response:
            return response.status, await response.read()

    async def post(self, path: str, body: Any = None) -> tuple[int, bytes]:
        async with self.session.post(self.url + path, json=body) as response:
            return response.status, await response.read()

    async def post_json(self, path: str, body: Any = None) -> tuple[int, Any]:
        status, raw = await self.post(path, body)
        return status, json.loads(raw)

    async def load(self, name: str, path: Path, *, inplace: bool = False) -> tuple[int, bytes]:
        body = {"lora_name": name, "lora_path": str(path), "load_inplace": inplace}
        status, raw = await self.post("/v1/load_lora_adapter", body)
        if status == 200:
            self.loaded.add(name)
        return status, raw

    async def unload(self, name: str) -> tuple[int, bytes]:
        status, raw = await self.post("/v1/unload_lora_adapter", {"lora_name": name})
        if status == 200:
            self.loaded.discard(name)
        return status, raw

    async def complete(self, **body: Any) -> Json:
        """A completion that must succeed; the base model unless ``model`` is given."""
        status, answer = await self.post_json("/v1/completions", {"model": self.model, **body})
        assert status == 200, answer
        result: Json = answer
        return result

    async def metrics(self) -> dict[str, float]:
        """``/metrics`` samples of this model, by metric name (labels dropped)."""
        status, raw = await self.get("/metrics")
        assert status == 200
        return parse_metrics(raw.decode(), self.model)


def parse_metrics(text: str, model: str) -> dict[str, float]:
    samples: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("#") or f'model_name="{model}"' not in line:
            continue
        name_and_labels, _, value = line.rpartition(" ")
        name = name_and_labels.split("{", 1)[0]
        samples[name] = samples.get(name, 0.0) + float(value)
    return samples


def sse_events(raw: bytes) -> list[str]:
    """The ``data:`` payloads of a server-sent event stream, in order."""
    events = []
    for block in raw.decode().split("\n\n"):
        for line in block.splitlines():
            if line.startswith("data: "):
                events.append(line.removeprefix("data: "))
    return events


def assert_error(body: Json, status: int, err_type: str | None = None) -> str:
    """Check vLLM's error shape; returns the message."""
    error = body["error"]
    assert set(error) >= {"message", "type", "param", "code"}, body
    assert error["code"] == status, body
    if err_type is not None:
        assert error["type"] == err_type, body
    message: str = error["message"]
    return message
