"""``/v1/completions`` as TRL's rollout worker uses it: token-id prompts, token ids and
log-probabilities back, the prefix cache's hit in ``usage``; and vLLM's error answers."""

from __future__ import annotations

import asyncio
import json

from adapter_receiver.reference import K, cuts_for
from proxy.adapters.attest.probe import TOLERANCE, gap, parse_answer, request
from tests.contract.support import Replica, assert_error, sse_events


async def test_token_id_prompt_returns_token_ids_and_logprobs(replica: Replica) -> None:
    prompt = replica.fresh_prompt(24)
    answer = await replica.complete(
        prompt=prompt, max_tokens=5, temperature=1.0, n=1, return_token_ids=True, logprobs=0
    )
    assert answer["object"] == "text_completion"
    assert answer["model"] == replica.model
    assert answer["id"] and isinstance(answer["created"], int)
    [choice] = answer["choices"]
    assert choice["index"] == 0
    assert choice["finish_reason"] == "length"
    assert choice["prompt_token_ids"] == prompt
    assert len(choice["token_ids"]) == 5
    assert isinstance(choice["text"], str)
    logprobs = choice["logprobs"]
    assert set(logprobs) >= {"tokens", "token_logprobs", "text_offset", "top_logprobs"}
    assert len(logprobs["tokens"]) == len(logprobs["token_logprobs"]) == 5
    assert len(logprobs["text_offset"]) == len(logprobs["top_logprobs"]) == 5
    assert all(lp <= 0 for lp in logprobs["token_logprobs"])
    usage = answer["usage"]
    assert usage["prompt_tokens"] == len(prompt)
    assert usage["completion_tokens"] == 5
    assert usage["total_tokens"] == len(prompt) + 5


async def test_top_logprobs_hold_the_sampled_token_and_k_more(replica: Replica) -> None:
    answer = await replica.complete(prompt=replica.fresh_prompt(8), max_tokens=3, logprobs=2)
    logprobs = answer["choices"][0]["logprobs"]
    for token, top in zip(logprobs["tokens"], logprobs["top_logprobs"], strict=True):
        assert token in top
        assert 2 <= len(top) <= 3


async def test_without_return_token_ids_no_ids_come_back(replica: Replica) -> None:
    answer = await replica.complete(prompt=replica.fresh_prompt(8), max_tokens=2)
    choice = answer["choices"][0]
    assert choice.get("token_ids") is None
    assert choice.get("prompt_token_ids") is None
    assert choice["logprobs"] is None


async def test_a_repeated_prompt_hits_the_prefix_cache_in_whole_blocks(replica: Replica) -> None:
    prompt = replica.fresh_prompt(6 * replica.block_size + 4)
    first = await replica.complete(prompt=prompt, max_tokens=2)
    second = await replica.complete(prompt=prompt, max_tokens=2)
    assert first["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    cached = second["usage"]["prompt_tokens_details"]["cached_tokens"]
    assert cached > 0
    assert cached % replica.block_size == 0
    # Whole blocks only, and the last prompt token is always recomputed.
    assert cached == (len(prompt) - 1) // replica.block_size * replica.block_size


async def test_an_extended_prompt_hits_its_shared_prefix(replica: Replica) -> None:
    prompt = replica.fresh_prompt(4 * replica.block_size)
    await replica.complete(prompt=prompt, max_tokens=1)
    longer = prompt + replica.fresh_prompt(2 * replica.block_size)
    answer = await replica.complete(prompt=longer, max_tokens=1)
    assert answer["usage"]["prompt_tokens_details"]["cached_tokens"] == len(prompt)


async def test_n_choices_are_numbered_and_counted(replica: Replica) -> None:
    answer = await replica.complete(
        prompt=replica.fresh_prompt(8), max_tokens=4, n=3, temperature=1.0, return_token_ids=True
    )
    assert [c["index"] for c in answer["choices"]] == [0, 1, 2]
    assert all(len(c["token_ids"]) == 4 for c in answer["choices"])
    assert answer["usage"]["completion_tokens"] == 12


async def test_a_batch_of_prompts_answers_prompt_major(replica: Replica) -> None:
    prompts = [replica.fresh_prompt(6), replica.fresh_prompt(9)]
    answer = await replica.complete(prompt=prompts, max_tokens=2, n=2, return_token_ids=True)
    choices = answer["choices"]
    assert [c["index"] for c in choices] == [0, 1, 2, 3]
    assert [c["prompt_token_ids"] for c in choices] == [prompts[0]] * 2 + [prompts[1]] * 2
    assert answer["usage"]["prompt_tokens"] == 15


async def test_a_text_prompt_is_tokenized(replica: Replica) -> None:
    answer = await replica.complete(prompt="The quick brown fox", max_tokens=2)
    assert answer["usage"]["prompt_tokens"] > 0
    assert answer["usage"]["completion_tokens"] == 2


async def test_the_same_seed_gives_the_same_tokens(replica: Replica) -> None:
    body = {
        "prompt": replica.fresh_prompt(12),
        "max_tokens": 6,
        "temperature": 1.0,
        "seed": 1234,
        "return_token_ids": True,
    }
    first = await replica.complete(**body)
    second = await replica.complete(**body)
    assert first["choices"][0]["token_ids"] == second["choices"][0]["token_ids"]


async def test_a_prompt_filling_the_context_with_max_tokens_is_served(replica: Replica) -> None:
    prompt = replica.fresh_prompt(replica.max_model_len - 2)
    answer = await replica.complete(prompt=prompt, max_tokens=2)
    assert answer["usage"]["completion_tokens"] == 2


async def test_max_tokens_is_clamped_to_the_context_and_overflow_is_refused(
    replica: Replica,
) -> None:
    limit = replica.max_model_len
    body = {"model": replica.model, "prompt": replica.fresh_prompt(limit - 2), "max_tokens": 3}
    status, answer = await replica.post_json("/v1/completions", {**body, "ignore_eos": True})
    assert status == 200  # vLLM clamps max_tokens to what the context leaves
    assert answer["usage"]["completion_tokens"] == 2
    assert answer["choices"][0]["finish_reason"] == "length"
    full = {**body, "prompt": replica.fresh_prompt(limit)}
    status, answer = await replica.post_json("/v1/completions", full)
    assert status == 400
    assert "max_tokens must be at least 1, got 0" in assert_error(answer, 400)
    over = {**body, "prompt": replica.fresh_prompt(limit + 5)}
    status, answer = await replica.post_json("/v1/completions", over)
    assert status == 400
    message = assert_error(answer, 400)
    assert f"maximum context length is {limit} tokens" in message
    assert "even without any output tokens" in message
    assert answer["error"]["param"] == "input_tokens"


async def test_an_unknown_model_is_not_found(replica: Replica) -> None:
    name = replica.unique("trl-policy-v9")
    status, body = await replica.post_json(
        "/v1/completions", {"model": name, "prompt": [1, 2, 3], "max_tokens": 1}
    )
    assert status == 404
    message = assert_error(body, 404, "NotFoundError")
    assert message.startswith(f"The model `{name}` does not exist.")
    assert body["error"]["param"] == "model"


async def test_invalid_json_is_a_bad_request(replica: Replica) -> None:
    async with replica.session.post(
        replica.url + "/v1/completions",
        data=b'{"prompt": [1, 2',
        headers={"Content-Type": "application/json"},
    ) as response:
        assert response.status == 400
        assert_error(json.loads(await response.read()), 400)


async def test_wrongly_typed_fields_are_bad_requests(replica: Replica) -> None:
    for body in (
        {"prompt": 7, "max_tokens": 1},
        {"prompt": [1, 2], "n": "two"},
        {"prompt": [1, 2], "max_tokens": "many"},
        {"prompt": [1, 2], "logprobs": "yes"},
    ):
        status, answer = await replica.post_json(
            "/v1/completions", {"model": replica.model, **body}
        )
        assert status == 400, body
        assert_error(answer, 400)


async def test_out_of_range_values_are_bad_requests(replica: Replica) -> None:
    for body in ({"n": 0}, {"max_tokens": 0}, {"temperature": -1.0}, {"logprobs": 21}):
        status, answer = await replica.post_json(
            "/v1/completions", {"model": replica.model, "prompt": [1, 2, 3], **body}
        )
        assert status == 400, body
        assert_error(answer, 400)


async def test_streaming_sends_one_chunk_per_token_then_done(replica: Replica) -> None:
    body = {
        "model": replica.model,
        "prompt": replica.fresh_prompt(10),
        "max_tokens": 4,
        "stream": True,
        "return_token_ids": True,
        "ignore_eos": True,  # a real model may sample its end token first: four tokens, always
    }
    async with replica.session.post(replica.url + "/v1/completions", json=body) as response:
        assert response.status == 200
        assert response.headers["Content-Type"].startswith("text/event-stream")
        events = sse_events(await response.read())
    assert events[-1] == "[DONE]"
    chunks = [json.loads(event) for event in events[:-1]]
    assert all(chunk["object"] == "text_completion" for chunk in chunks)
    token_ids = [t for chunk in chunks for c in chunk["choices"] for t in c["token_ids"] or []]
    assert len(token_ids) == 4
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"
    # What stream migration continues from: the prompt's ids on the first chunk only.
    assert chunks[0]["choices"][0]["prompt_token_ids"] == body["prompt"]
    assert all(c.get("prompt_token_ids") is None for chunk in chunks[1:] for c in chunk["choices"])


async def test_streaming_with_usage_ends_with_a_usage_chunk(replica: Replica) -> None:
    body = {
        "model": replica.model,
        "prompt": replica.fresh_prompt(10),
        "max_tokens": 3,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    async with replica.session.post(replica.url + "/v1/completions", json=body) as response:
        events = sse_events(await response.read())
    usage_chunk = json.loads(events[-2])
    assert usage_chunk["choices"] == []
    assert usage_chunk["usage"]["completion_tokens"] == 3
    assert usage_chunk["usage"]["prompt_tokens"] == 10


async def test_text_offsets_index_the_text_also_across_stream_chunks(replica: Replica) -> None:
    body = {"model": replica.model, "prompt": replica.fresh_prompt(6), "max_tokens": 5}
    answer = await replica.complete(**body, logprobs=0)
    logprobs = answer["choices"][0]["logprobs"]
    text = answer["choices"][0]["text"]
    for token, offset in zip(logprobs["tokens"], logprobs["text_offset"], strict=True):
        assert text[offset : offset + len(token)] == token
    async with replica.session.post(
        replica.url + "/v1/completions", json={**body, "logprobs": 0, "stream": True}
    ) as response:
        events = sse_events(await response.read())
    # A chunk usually carries one token, but vLLM holds back a token whose text is not yet a
    # whole character and sends it with the next one: offsets then count on inside the chunk.
    streamed = ""
    for event in events[:-1]:
        choice = json.loads(event)["choices"][0]
        offsets = choice["logprobs"]["text_offset"]
        assert len(offsets) == len(choice["logprobs"]["tokens"]) >= 1
        assert offsets[0] == len(streamed)
        assert offsets == sorted(offsets)
        streamed += choice["text"]
        assert offsets[-1] <= len(streamed)


async def test_the_policy_probe_gives_each_prefix_its_top_logprobs(replica: Replica) -> None:
    """The served-policy probe's request, as the proxy sends it
    (``proxy.adapters.attest.probe``): one prompt per prefix, one token, ``K`` top logprobs
    named ``token_id:N``; the distribution, not a sample: the same on a second ask."""
    ids = replica.fresh_prompt(24)
    cuts = cuts_for(len(ids))
    body = request(replica.model, ids, cuts)
    status, first = await replica.post_json("/v1/completions", body)
    assert status == 200, first
    for choice in first["choices"]:
        top = choice["logprobs"]["top_logprobs"][0]
        assert len(top) >= K and all(key.startswith("token_id:") for key in top)
        assert all(value <= 0 for value in top.values())
    status, again = await replica.post_json("/v1/completions", body)
    assert parse_answer(first, len(cuts)) == parse_answer(again, len(cuts))


async def test_a_loaded_adapter_answers_the_probe_otherwise_than_the_base_even_in_a_batch(
    replica: Replica,
) -> None:
    """Asked while rollouts run (vLLM batches them together: its ``prompt_logprobs`` under LoRA
    kill the engine there, vLLM #16668), the probe answers, a loaded adapter's answer differs
    from the base model's, and the base model's is the one it gives alone (vLLM's CPU LoRA ops
    apply the last adapter slot to base-model tokens, vLLM #48421: ``replica_entry`` fixes them
    in its vLLM, ``replica_entry.vllm_cpu_lora``)."""
    name = replica.unique("probe")
    assert (await replica.load(name, replica.make_adapter(name)))[0] == 200
    ids = replica.fresh_prompt(24)
    cuts = cuts_for(len(ids))

    async def probe(model: str) -> tuple[float, ...]:
        status, answer = await replica.post_json("/v1/completions", request(model, ids, cuts))
        assert status == 200, answer
        return parse_answer(answer, len(cuts))

    rollouts = [replica.complete(model=name, prompt=replica.fresh_prompt(30), max_tokens=8)
                for _ in range(3)]  # fmt: skip
    probes = asyncio.ensure_future(asyncio.gather(probe(name), probe(replica.model)))
    await asyncio.gather(probes, *rollouts)
    adapter, base = probes.result()
    # As the proxy judges: beyond the tightest tolerance apart, and within it of the base alone.
    assert gap(adapter, base) > TOLERANCE["float32"]
    assert gap(base, await probe(replica.model)) <= TOLERANCE["float32"]
    assert (await replica.complete(model=name, prompt=ids, max_tokens=2))["choices"]
    await replica.unload(name)
