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
from typing import Any

import orjson
from aiohttp import web

from replica_entry.sim.engine import Probe
from replica_entry.sim.generation import Generation, Sequence
from replica_entry.sim.middleware import RECORD, client_gone
from replica_entry.sim.protocol import GenerateRequest, tokens_job
from replica_entry.sim.render import usage
from replica_entry.sim.routes_generate import DONE, SSE_HEADERS, inject_faults, read_job, send
from replica_entry.sim.state import SIM_STATE

routes = web.RouteTableDef()
Json = dict[str, Any]


@routes.post("/inference/v1/generate")
async def generate(request: web.Request) -> web.StreamResponse:
    state = request.app[SIM_STATE]
    job = await read_job(request, state, GenerateRequest, tokens_job)
    probe = partial(client_gone, request)
    request_id = f"generate-tokens-{uuid.uuid4().hex}"
    async with state.engine.tracked():
        await inject_faults(state.faults, probe, job.model)
        async with state.simulator.run(job, probe) as gen:
            request[RECORD].cached_tokens = sum(gen.cached)
            if job.stream:
                return await _stream(request, gen, request_id, probe)
            await gen.decode(job.steps, probe)
            payload = orjson.dumps(_body(gen, request_id))
    return web.Response(body=payload, content_type="application/json")


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
    request: web.Request, gen: Generation, request_id: str, probe: Probe
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
        await send(response, chunks)
    if gen.job.include_usage:
        tail = {"request_id": request_id, "usage": usage(gen, gen.cached[0]),
                "output_mode": "tokens", "choices": []}  # fmt: skip
        await send(response, [tail])
    await response.write(DONE)
    await response.write_eof()
    return response
