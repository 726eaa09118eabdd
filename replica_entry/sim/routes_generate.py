"""``/v1/completions`` and ``/v1/chat/completions``: parse, check, run, answer.

Order of checks, as in vLLM: media type and JSON, the request schema, the model (404 unless
the base model or a loaded adapter), then values and lengths. Injected faults act next (delay,
then ``fail_status``), inside the in-flight count so a slow replica shows its backlog. A
non-streamed answer is sent in one write; a streamed one as server-sent events, one decode step
at a time, so per-token latency shows between chunks.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from functools import partial
from typing import Any, TypeVar

import orjson
from aiohttp import web

from replica_entry.sim import render
from replica_entry.sim.engine import Probe, sleep
from replica_entry.sim.errors import ApiError, parse_json
from replica_entry.sim.generation import Generation
from replica_entry.sim.middleware import RECORD, client_gone
from replica_entry.sim.policy import BASE
from replica_entry.sim.protocol import (
    ChatRequest,
    CompletionRequest,
    GenerateRequest,
    GenerationJob,
    chat_job,
    completion_job,
    parse_request,
)
from replica_entry.sim.settings import Faults, SimSettings
from replica_entry.sim.state import SIM_STATE, SimState

routes = web.RouteTableDef()

R = TypeVar("R", CompletionRequest, ChatRequest, GenerateRequest)
SSE_HEADERS = {"Content-Type": "text/event-stream; charset=utf-8", "Cache-Control": "no-cache"}
DONE = b"data: [DONE]\n\n"


@routes.post("/v1/completions")
async def completions(request: web.Request) -> web.StreamResponse:
    return await _generate(request, CompletionRequest, completion_job)


@routes.post("/v1/chat/completions")
async def chat_completions(request: web.Request) -> web.StreamResponse:
    return await _generate(request, ChatRequest, chat_job)


async def _generate(
    request: web.Request, model: type[R], build: Callable[..., GenerationJob]
) -> web.StreamResponse:
    state = request.app[SIM_STATE]
    job = await read_job(request, state, model, build)
    probe = partial(client_gone, request)
    async with state.engine.tracked():
        faults = state.faults
        await inject_faults(faults, probe, job.model)
        meta = render.Meta.new(job.kind, job.model)
        async with state.simulator.run(job, probe) as gen:
            request[RECORD].cached_tokens = sum(gen.cached)
            if job.stream:
                return await _stream(request, gen, meta, probe, faults.drop_mid_response)
            await gen.decode(job.steps, probe)
            if job.kind == "completion":
                payload = orjson.dumps(render.completion_body(gen, meta))
            else:
                payload = orjson.dumps(render.chat_body(gen, meta))
    if faults.drop_mid_response:
        return await _drop(request, payload)
    return web.Response(body=payload, content_type="application/json")


async def read_job(
    request: web.Request, state: SimState, model: type[R], build: Callable[..., GenerationJob]
) -> GenerationJob:
    if request.content_type != "application/json":
        raise ApiError("Unsupported Media Type: Only 'application/json' is allowed")
    parsed = parse_request(model, parse_json(await request.read()))
    record = request[RECORD]
    record.model = parsed.model
    settings = state.settings
    lora = _resolve_model(parsed.model, settings, state)
    job = build(parsed, served=lora or settings.model, lora=lora, settings=settings)
    job = dataclasses.replace(job, policy=_policy(state, lora))
    record.prompt_tokens = sum(len(prompt) for prompt in job.prompts)
    record.top_logprobs = job.top_logprobs
    return job


async def inject_faults(faults: Faults, probe: Probe, model: str | None) -> None:
    """The configured delay, then the configured failure (for ``model``'s requests when the
    failure names one); inside the in-flight count."""
    await sleep(faults.delay_s, probe)
    if faults.fail_status is not None and faults.fail_model in (None, model):
        raise ApiError("Simulated failure (fault injection).", status=faults.fail_status)


def _policy(state: SimState, lora: str | None) -> str:
    """The policy this replica answers ``lora`` with (``Faults.policy``)."""
    adapter = state.adapters.get(lora) if lora is not None else None
    if adapter is None or state.faults.policy == "base":
        return BASE
    return adapter.previous if state.faults.policy == "previous" else adapter.policy


def _resolve_model(name: str | None, settings: SimSettings, state: SimState) -> str | None:
    """The adapter a request names (``None`` for the base model); vLLM's 404 otherwise."""
    if name is None or name == settings.model:
        return None
    if name in state.adapters:
        return name
    raise ApiError(
        f"The model `{name}` does not exist.", status=404, err_type="NotFoundError", param="model"
    )


async def _stream(
    request: web.Request, gen: Generation, meta: render.Meta, probe: Probe, drop: bool
) -> web.StreamResponse:
    response = web.StreamResponse(headers=SSE_HEADERS)
    await response.prepare(request)
    sent = False
    if gen.job.kind == "chat":
        sent = await send(response, render.role_chunks(gen, meta))
    while not gen.done:
        if drop and sent:
            return _cut(request, response)
        before = gen.step
        await gen.decode(1, probe)
        sent = await send(response, render.token_chunks(gen, meta, before, gen.step)) or sent
    if drop:
        return _cut(request, response)
    tail = render.abort_chunks(gen, meta)
    if gen.job.include_usage:
        tail.append(render.usage_chunk(gen, meta))
    await send(response, tail)
    await response.write(DONE)
    await response.write_eof()
    return response


async def send(response: web.StreamResponse, chunks: list[dict[str, Any]]) -> bool:
    """Write ``chunks`` as server-sent events in one write; whether anything was written."""
    if not chunks:
        return False
    await response.write(b"".join(b"data: " + orjson.dumps(c) + b"\n\n" for c in chunks))
    return True


async def _drop(request: web.Request, payload: bytes) -> web.StreamResponse:
    """Announce the whole body, send half of it, and hang up."""
    response = web.StreamResponse(headers={"Content-Type": "application/json"})
    response.content_length = len(payload)
    await response.prepare(request)
    await response.write(payload[: len(payload) // 2])
    return _cut(request, response)


def _cut(request: web.Request, response: web.StreamResponse) -> web.StreamResponse:
    state = request.app[SIM_STATE]
    state.records.mark_dropped(request[RECORD])
    if request.transport is not None:
        request.transport.close()
    return response
