"""``POST /inference/v1/generate``: token ids in, token ids out (vLLM's token-in generation,
served with ``--enable-scale-out``, which ``replica_entry --backend vllm`` adds)."""

from __future__ import annotations

import json
from typing import Any

from tests.contract.support import Replica, assert_error, sse_events

ROUTE = "/inference/v1/generate"


def body(replica: Replica, token_ids: list[int], **extra: Any) -> dict[str, Any]:
    params = {"max_tokens": 6, "temperature": 1.0, "ignore_eos": True}
    params.update(extra.pop("sampling_params", {}))
    return {"model": replica.model, "token_ids": token_ids, "sampling_params": params, **extra}


async def test_token_ids_in_token_ids_and_logprobs_out(replica: Replica) -> None:
    prompt = replica.fresh_prompt(20)
    status, answer = await replica.post_json(
        ROUTE, body(replica, prompt, sampling_params={"logprobs": 1}, return_token_ids=True)
    )
    assert status == 200, answer
    assert answer["model"] == replica.model
    assert answer["output_mode"] == "tokens"
    assert answer["request_id"] and isinstance(answer["created"], int)
    assert answer["prompt_token_ids"] == prompt
    [choice] = answer["choices"]
    assert choice["index"] == 0
    assert choice["finish_reason"] == "length"
    assert len(choice["token_ids"]) == 6
    content = choice["logprobs"]["content"]
    assert [entry["token_id"] for entry in content] == choice["token_ids"]
    assert all(entry["logprob"] <= 0 for entry in content)
    assert all(1 <= len(entry["top_logprobs"]) <= 2 for entry in content)
    usage = answer["usage"]
    assert (usage["prompt_tokens"], usage["completion_tokens"]) == (20, 6)
    assert usage["total_tokens"] == 26


async def test_without_logprobs_or_return_token_ids_only_the_answer_comes_back(
    replica: Replica,
) -> None:
    status, answer = await replica.post_json(ROUTE, body(replica, replica.fresh_prompt(8)))
    assert status == 200, answer
    assert answer["prompt_token_ids"] is None
    assert answer["choices"][0]["logprobs"] is None
    assert len(answer["choices"][0]["token_ids"]) == 6


async def test_a_repeated_prompt_hits_the_prefix_cache(replica: Replica) -> None:
    prompt = replica.fresh_prompt(4 * replica.block_size + 3)
    first = await replica.post_json(ROUTE, body(replica, prompt))
    second = await replica.post_json(ROUTE, body(replica, prompt))
    assert first[0] == second[0] == 200
    assert first[1]["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    cached = second[1]["usage"]["prompt_tokens_details"]["cached_tokens"]
    assert cached > 0 and cached % replica.block_size == 0


async def test_a_stream_sends_the_tokens_then_usage_then_done(replica: Replica) -> None:
    extra = {"stream": True, "stream_options": {"include_usage": True}}
    status, raw = await replica.post(ROUTE, body(replica, replica.fresh_prompt(8), **extra))
    assert status == 200
    events = sse_events(raw)
    assert events[-1] == "[DONE]"
    chunks = [json.loads(event) for event in events[:-1]]
    tokens = [t for chunk in chunks for choice in chunk["choices"] for t in choice["token_ids"]]
    assert len(tokens) == 6
    finishes = [c["finish_reason"] for chunk in chunks for c in chunk["choices"]]
    assert finishes[-1] == "length"
    assert chunks[-1]["choices"] == []
    assert chunks[-1]["usage"]["completion_tokens"] == 6


async def test_bad_requests_are_refused_as_vllm_does(replica: Replica) -> None:
    status, answer = await replica.post_json(ROUTE, body(replica, []))
    assert status == 400
    assert_error(answer, 400)
    status, answer = await replica.post_json(ROUTE, {"token_ids": [1, 2, 3]})
    assert status == 400  # sampling_params is required
    assert_error(answer, 400)
    unknown = {**body(replica, [1, 2, 3]), "model": "trl-policy-v999"}
    status, answer = await replica.post_json(ROUTE, unknown)
    assert status == 404
    assert_error(answer, 404)
