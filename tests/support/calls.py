"""Talking to a proxy stack in tests: TRL-shaped bodies, requests, a replica's records, metrics."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

from tests.support.fleet import Stack

PROMPT = list(range(100, 164))


def completion(model: str = "sim-model", **extra: Any) -> dict[str, Any]:
    """A completion body as TRL's rollout worker sends it."""
    return {
        "model": model,
        "prompt": PROMPT,
        "max_tokens": 8,
        "temperature": 1.0,
        "n": 1,
        "return_token_ids": True,
        "logprobs": 0,
        **extra,
    }


def load_body(name: str, path: Path) -> dict[str, Any]:
    return {"lora_name": name, "lora_path": str(path), "load_inplace": False}


async def post(stack: Stack, path: str, payload: Any, **kw: Any) -> tuple[int, bytes, Any]:
    """POST to the proxy; ``payload`` is JSON-encoded unless it is bytes."""
    data = payload if isinstance(payload, bytes) else orjson.dumps(payload)
    kw["headers"] = {"Content-Type": "application/json", **kw.get("headers", {})}
    async with stack.session.post(stack.proxy_url + path, data=data, **kw) as resp:
        return resp.status, await resp.read(), resp.headers


async def load(stack: Stack, body: dict[str, Any]) -> tuple[int, bytes, Any]:
    return await post(stack, "/v1/load_lora_adapter", body)


async def records(stack: Stack, index: int) -> list[dict[str, Any]]:
    """The requests simulated replica ``index`` has seen."""
    async with stack.session.get(stack.sims[index].url + "/sim/requests") as resp:
        data = await resp.json()
    return list(data["records"] if isinstance(data, dict) else data)


def rolled_out(record: dict[str, Any]) -> bool:
    """A simulated replica's record of a completion a client asked for (not the proxy's
    served-policy probe, which asks for top logprobs; TRL's rollouts ask for none)."""
    return bool(record["path"] == "/v1/completions" and not record["top_logprobs"])


async def listed(stack: Stack, index: int) -> list[str]:
    """Model ids simulated replica ``index`` lists (base model and adapters)."""
    async with stack.session.get(stack.sims[index].url + "/v1/models") as resp:
        return [entry["id"] for entry in (await resp.json())["data"]]


async def metrics_text(stack: Stack) -> str:
    async with stack.session.get(stack.proxy_url + "/metrics") as resp:
        return await resp.text()


def metric_value(text: str, name: str) -> float:
    """The value of the first sample line starting with ``name`` (labels included in name)."""
    for line in text.splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"metric {name} not found")
