"""Replica routes other than generation: health, configuration, models, adapters, pause,
cache and metrics, each answering what vLLM (with ``VLLM_SERVER_DEV_MODE=1`` and runtime LoRA
updating) answers."""

from __future__ import annotations

import time
import uuid
from typing import Any

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST

from replica_entry.sim.adapters import LoadRequest, UnloadRequest
from replica_entry.sim.errors import ApiError, json_response, parse_json
from replica_entry.sim.middleware import RECORD
from replica_entry.sim.pause import PAUSE_MODES
from replica_entry.sim.protocol import parse_request
from replica_entry.sim.settings import SimSettings
from replica_entry.sim.state import SIM_STATE
from replica_entry.sim.tokenizer import decode, encode_text

routes = web.RouteTableDef()
SIM_VERSION = "0.32.0+sim"


@routes.get("/health")
async def health(request: web.Request) -> web.Response:
    return web.Response(status=503 if request.app[SIM_STATE].faults.unhealthy else 200)


@routes.get("/server_info")
async def server_info(request: web.Request) -> web.Response:
    config_format = request.query.get("config_format", "text")
    if config_format not in ("text", "json"):
        raise ApiError(
            f"config_format: Input should be 'text' or 'json', got {config_format!r}",
            param="config_format",
        )
    config = vllm_config(request.app[SIM_STATE].settings)
    shown: Any = config if config_format == "json" else _as_text(config)
    return json_response({"vllm_config": shown, "vllm_env": {}, "system_env": {}})


def vllm_config(settings: SimSettings) -> dict[str, Any]:
    """The parts of vLLM's ``VllmConfig`` that clients read."""
    return {
        "model_config": {
            "model": settings.model,
            "served_model_name": settings.model,
            "dtype": "torch.float32",
            "max_model_len": settings.max_model_len,
            "seed": settings.seed,
        },
        "cache_config": {
            "block_size": settings.block_size,
            "enable_prefix_caching": True,
            "num_gpu_blocks": settings.cache_blocks,
        },
        "parallel_config": {"data_parallel_size": 1, "tensor_parallel_size": 1},
        "lora_config": {
            "max_lora_rank": settings.max_lora_rank,
            "max_loras": settings.max_loras,
            "max_cpu_loras": settings.effective_max_cpu_loras,
        },
    }


def _as_text(config: dict[str, Any]) -> str:
    return ", ".join(
        f"{section}.{key}={value!r}"
        for section, fields in config.items()
        for key, value in fields.items()
    )


@routes.get("/v1/models")
async def models(request: web.Request) -> web.Response:
    state = request.app[SIM_STATE]
    model = state.settings.model
    cards = [_card(model, model, None, state.settings.max_model_len)]
    cards += [_card(a.name, a.path, model, None, a.created) for a in state.adapters.listed()]
    return json_response({"object": "list", "data": cards})


def _card(
    name: str, root: str, parent: str | None, max_model_len: int | None, created: int | None = None
) -> dict[str, Any]:
    now = int(time.time())
    permission = {
        "id": f"modelperm-{uuid.uuid4().hex}",
        "object": "model_permission",
        "created": now,
        "allow_create_engine": False,
        "allow_sampling": True,
        "allow_logprobs": True,
        "allow_search_indices": False,
        "allow_view": True,
        "allow_fine_tuning": False,
        "organization": "*",
        "group": None,
        "is_blocking": False,
    }
    return {
        "id": name,
        "object": "model",
        "created": now if created is None else created,
        "owned_by": "vllm",
        "root": root,
        "parent": parent,
        "max_model_len": max_model_len,
        "permission": [permission],
    }


@routes.post("/v1/load_lora_adapter")
async def load_lora_adapter(request: web.Request) -> web.Response:
    state = request.app[SIM_STATE]
    load = parse_request(LoadRequest, parse_json(await request.read()))
    request[RECORD].model = load.lora_name
    lag = 0.0 if state.stored(load.lora_path) else state.faults.mount_lag_s  # pushed: local disk
    return web.Response(text=state.adapters.load(load, lag))


@routes.post("/v1/unload_lora_adapter")
async def unload_lora_adapter(request: web.Request) -> web.Response:
    state = request.app[SIM_STATE]
    unload = parse_request(UnloadRequest, parse_json(await request.read()))
    request[RECORD].model = unload.lora_name
    try:
        text = state.adapters.unload(unload)
    except ApiError as exc:
        if exc.status == 404:  # not loaded here: a stored copy may go
            await _forget_stored(request, unload.lora_name)
        raise
    await _forget_stored(request, unload.lora_name)
    return web.Response(text=text)


async def _forget_stored(request: web.Request, name: str) -> None:
    receiver = request.app[SIM_STATE].receiver
    if receiver is not None:
        await receiver.unloaded(name)


@routes.post("/pause")
async def pause(request: web.Request) -> web.Response:
    """vLLM's default mode is ``abort``; ``clear_cache`` (default true) resets the prefix cache
    once ``wait``/``abort`` have drained the engine, and is ignored by ``keep``."""
    state = request.app[SIM_STATE]
    raw = request.query.get("mode", "abort")
    mode = next((m for m in PAUSE_MODES if m == raw), None)
    if mode is None:
        raise ApiError(
            f"mode: Input should be 'abort', 'wait' or 'keep', got {raw!r}", param="mode"
        )
    await state.engine.pause(mode)
    if mode != "keep" and request.query.get("clear_cache", "true").lower() in ("true", "1"):
        state.cache.clear()
    return json_response({"status": "paused"})


@routes.post("/resume")
async def resume(request: web.Request) -> web.Response:
    request.app[SIM_STATE].engine.resume()
    return json_response({"status": "resumed"})


@routes.get("/is_paused")
async def is_paused(request: web.Request) -> web.Response:
    return json_response({"is_paused": request.app[SIM_STATE].engine.gate.paused})


@routes.post("/reset_prefix_cache")
async def reset_prefix_cache(request: web.Request) -> web.Response:
    request.app[SIM_STATE].cache.clear()
    return json_response({"success": True})


@routes.get("/metrics")
async def metrics(request: web.Request) -> web.Response:
    state = request.app[SIM_STATE]
    state.metrics.refresh(state.engine_snapshot())
    return web.Response(
        body=state.metrics.exposition(), headers={"Content-Type": CONTENT_TYPE_LATEST}
    )


@routes.get("/version")
async def version(request: web.Request) -> web.Response:
    return json_response({"version": SIM_VERSION})


@routes.get("/get_world_size")
async def get_world_size(request: web.Request) -> web.Response:
    """vLLM's (dev mode) and TRL's ``vllm_serve``'s answer: the engine's ranks, tensor x data
    parallel (x pipeline, for vLLM). The simulated engine is one rank, whatever ``include_dp``."""
    return json_response({"world_size": 1})


@routes.route("*", "/ping")
async def ping(request: web.Request) -> web.Response:
    if request.method not in ("GET", "POST"):
        raise web.HTTPMethodNotAllowed(request.method, ["GET", "POST"])
    return web.Response(status=503 if request.app[SIM_STATE].faults.unhealthy else 200)


@routes.post("/tokenize")
async def tokenize(request: web.Request) -> web.Response:
    """vLLM's ``/tokenize`` for a text ``prompt``: the simulated tokenizer's ids."""
    body = parse_json(await request.read())
    prompt = body.get("prompt") if isinstance(body, dict) else None
    if not isinstance(prompt, str):
        raise ApiError("prompt: Input should be a valid string", param="prompt")
    settings = request.app[SIM_STATE].settings
    tokens = encode_text(prompt, settings.vocab_size)
    return json_response(
        {"count": len(tokens), "max_model_len": settings.max_model_len, "tokens": tokens}
    )


@routes.post("/detokenize")
async def detokenize(request: web.Request) -> web.Response:
    body = parse_json(await request.read())
    tokens = body.get("tokens") if isinstance(body, dict) else None
    if not isinstance(tokens, list) or not all(isinstance(t, int) for t in tokens):
        raise ApiError("tokens: Input should be a valid list of integers", param="tokens")
    return json_response({"prompt": decode(tokens)})
