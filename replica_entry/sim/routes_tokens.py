"""``POST /inference/v1/generate``: token ids in, token ids out (vLLM's token-in generation).

vLLM serves it when started with ``--enable-scale-out`` (module
``vllm.entrypoints.scale_out.token_in_token_out``); the simulation always does. The body is
``{"token_ids": [...], "sampling_params": {...}, "model", "stream", "stream_options",
"return_token_ids", "output_mode"}``; only ``output_mode: "tokens"`` is simulated (the server
has no detokenized answer to give). The answer mirrors vLLM's ``GenerateTokensResponse``: usage
near the top, then choices of token ids with ``logprobs.content`` entries ``{token_id, logprob,
rank, top_logprobs}`` when ``sampling_params.logprobs`` is set; ``prompt_token_ids`` only with
``return_token_ids``. A stream sends one chunk per decode step and choice, the usage chunk when
``stream_options.include_usage``, then ``[DONE]``.
"""

from __future__ import annotations

import time
import uuid
from functools import partial
from typing import Any, Literal

import orjson
from aiohttp import web
from pydantic import BaseModel, ConfigDict, Field

from replica_entry.sim.engine import sleep
from replica_entry.sim.errors import ApiError, parse_json
from replica_entry.sim.generation import Generation, Sequence
from replica_entry.sim.middleware import RECORD, client_gone
from replica_entry.sim.protocol import (
    DEFAULT_MAX_TOKENS,
    GenerationJob,
    StreamOptions,
    check_token_ids,
    parse_request,
    token_budgets,
)
from replica_entry.sim.render import usage
from replica_entry.sim.routes_generate import DONE, SSE_HEADERS, resolve_model
from replica_entry.sim.state import SIM_STATE

routes = web.RouteTableDef()
Json = dict[str, Any]


class SamplingParams(BaseModel):
    model_config = ConfigDict(extra="allow")

    n: int = 1
    max_tokens: int | None = None
    temperature: float | None = None
    seed: int | None = None
    logprobs: int | None = None


class GenerateRequest(BaseModel):
    model_config = ConfigDict(extra="allow")

    token_ids: list[int] = Field(min_length=1)
    sampling_params: SamplingParams
    model: str | None = None
    stream: bool | None = False
    stream_options: StreamOptions | None = None
    return_token_ids: bool | None = None
    output_mode: Literal["tokens", "text"] = "tokens"


@routes.post("/inference/v1/generate")
async def generate(request: web.Request) -> web.StreamResponse:
    state = request.app[SIM_STATE]
    if request.content_type != "application/json":
        raise ApiError("Unsupported Media Type: Only 'application/json' is allowed")
    parsed = parse_request(GenerateRequest, parse_json(await request.read()))
    record = request[RECORD]
    record.model = parsed.model
    settings = state.settings
    lora = resolve_model(parsed.model, settings, state)
    job = _job(parsed, lora or settings.model, lora, settings.max_model_len, settings.seed)
    record.prompt_tokens = len(job.prompts[0])
    probe = partial(client_gone, request)
    request_id = f"generate-tokens-{uuid.uuid4().hex}"
    async with state.engine.tracked():
        faults = state.faults
        await sleep(faults.delay_s, probe)
        if faults.fail_status is not None:
            raise ApiError("Simulated failure (fault injection).", status=faults.fail_status)
        async with state.simulator.run(job, probe) as gen:
            record.cached_tokens = sum(gen.cached)
            if job.stream:
                return await _stream(request, gen, request_id, probe)
            await gen.decode(job.steps, probe)
            payload = orjson.dumps(_body(gen, request_id))
    return web.Response(body=payload, content_type="application/json")


def _job(
    request: GenerateRequest, served: str, lora: str | None, max_model_len: int, seed: int
) -> GenerationJob:
    if request.output_mode != "tokens":
        raise ApiError("output_mode='text' is not simulated; use output_mode='tokens'.")
    check_token_ids(request.token_ids)
    params = request.sampling_params
    if params.n < 1:
        raise ApiError(f"n must be at least 1, got {params.n}.", param="n")
    if params.max_tokens is not None and params.max_tokens < 1:
        raise ApiError(f"max_tokens must be at least 1, got {params.max_tokens}.")
    prompts = [list(request.token_ids)]
    budgets = token_budgets(prompts, params.max_tokens, max_model_len, DEFAULT_MAX_TOKENS)
    return GenerationJob(
        kind="completion",
        model=served,
        lora=lora,
        prompts=(tuple(request.token_ids),),
        max_tokens=tuple(budgets),
        n=params.n,
        seed=seed if params.seed is None else params.seed,
        greedy=params.temperature == 0,
        top_logprobs=params.logprobs,
        return_token_ids=bool(request.return_token_ids),
        stream=bool(request.stream),
        include_usage=bool(request.stream_options and request.stream_options.include_usage),
    )


def _body(gen: Generation, request_id: str) -> Json:
    job = gen.job
    return {
        "request_id": request_id,
        "model": job.model,
        "created": int(time.time()),
        "usage": usage(gen, gen.cached[0]),
        "prompt_logprobs": None,
        "prompt_token_id_logprobs": None,
        "prompt_token_ids": list(job.prompts[0]) if job.return_token_ids else None,
        "mm_placeholders": None,
        "metrics": None,
        "kv_transfer_params": None,
        "ec_transfer_params": None,
        "output_mode": "tokens",
        "choices": [_choice(gen, seq, 0, gen.emitted(seq), done=True) for seq in gen.sequences],
    }


def _choice(gen: Generation, seq: Sequence, start: int, end: int, *, done: bool) -> Json:
    return {
        "index": seq.index,
        "finish_reason": gen.finish_reason(seq) if done else None,
        "stop_reason": None,
        "token_ids": list(seq.sampled.token_ids[start:end]),
        "routed_experts": None,
        "sampling_mask": None,
        "weight_versions": None,
        "logprobs": _logprobs(gen, seq, start, end),
    }


def _logprobs(gen: Generation, seq: Sequence, start: int, end: int) -> Json | None:
    """vLLM's ``GenerateLogProbs``: the sampled token first, then its top alternatives."""
    k = gen.job.top_logprobs
    if k is None:
        return None
    sampled = seq.sampled
    content = []
    for token, logprob, step in zip(
        sampled.token_ids[start:end], sampled.logprobs[start:end], sampled.top[start:end],
        strict=True,
    ):  # fmt: skip
        top = [{"token_id": t, "logprob": lp, "rank": rank} for rank, (t, lp) in
               enumerate(step[: max(k, 1)], start=1)]  # fmt: skip
        content.append({"token_id": token, "logprob": logprob, "rank": 1, "top_logprobs": top})
    return {"content": content}


async def _stream(
    request: web.Request, gen: Generation, request_id: str, probe: Any
) -> web.StreamResponse:
    response = web.StreamResponse(headers=SSE_HEADERS)
    await response.prepare(request)
    first = gen.job.return_token_ids
    while not gen.done:
        before = gen.step
        await gen.decode(1, probe)
        chunks = []
        for seq in gen.sequences:
            end = gen.emitted(seq)
            if end <= before and not (gen.aborted and end < seq.budget):
                continue
            done = end >= seq.budget or gen.aborted
            chunk: Json = {"request_id": request_id, "usage": None}
            if first:
                chunk["prompt_token_ids"] = list(gen.job.prompts[0])
                first = False
            chunk["output_mode"] = "tokens"
            chunk["choices"] = [_choice(gen, seq, min(before, end), end, done=done)]
            chunks.append(chunk)
        if chunks:
            await response.write(b"".join(b"data: " + orjson.dumps(c) + b"\n\n" for c in chunks))
    if gen.job.include_usage:
        tail = {"request_id": request_id, "usage": usage(gen, gen.cached[0]),
                "output_mode": "tokens", "choices": []}  # fmt: skip
        await response.write(b"data: " + orjson.dumps(tail) + b"\n\n")
    await response.write(DONE)
    await response.write_eof()
    return response
