"""``/v1/chat/completions``: messages in, ``chat.completion`` (or its chunks) out."""

from __future__ import annotations

import json

from tests.contract.support import Replica, assert_error, sse_events


def _messages(replica: Replica) -> list[dict[str, str]]:
    return [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": f"Say something about {replica.unique('topic')}."},
    ]


async def test_chat_answers_an_assistant_message(replica: Replica) -> None:
    status, answer = await replica.post_json(
        "/v1/chat/completions",
        {"model": replica.model, "messages": _messages(replica), "max_tokens": 4, "n": 2},
    )
    assert status == 200
    assert answer["object"] == "chat.completion"
    assert answer["model"] == replica.model
    assert [c["index"] for c in answer["choices"]] == [0, 1]
    for choice in answer["choices"]:
        assert choice["message"]["role"] == "assistant"
        assert isinstance(choice["message"]["content"], str)
        assert choice["finish_reason"] == "length"
    assert answer["usage"]["completion_tokens"] == 8
    assert answer["usage"]["prompt_tokens"] > 0


async def test_a_continued_conversation_hits_the_prefix_cache(replica: Replica) -> None:
    messages = [*_messages(replica), {"role": "user", "content": "x" * 4 * replica.block_size}]
    body = {"model": replica.model, "messages": messages, "max_tokens": 2}
    await replica.post_json("/v1/chat/completions", body)
    follow_up = [
        *messages,
        {"role": "assistant", "content": "ok"},
        {"role": "user", "content": "and more"},
    ]
    status, answer = await replica.post_json(
        "/v1/chat/completions", {**body, "messages": follow_up}
    )
    assert status == 200
    cached = answer["usage"]["prompt_tokens_details"]["cached_tokens"]
    assert cached >= 4 * replica.block_size
    assert cached % replica.block_size == 0


async def test_chat_streams_chunks_ending_in_done(replica: Replica) -> None:
    body = {"model": replica.model, "messages": _messages(replica), "max_tokens": 3, "stream": True}
    async with replica.session.post(replica.url + "/v1/chat/completions", json=body) as response:
        assert response.status == 200
        assert response.headers["Content-Type"].startswith("text/event-stream")
        events = sse_events(await response.read())
    assert events[-1] == "[DONE]"
    chunks = [json.loads(event) for event in events[:-1]]
    assert all(chunk["object"] == "chat.completion.chunk" for chunk in chunks)
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks)
    assert text


async def test_a_chat_stream_reports_its_templated_prompt_and_each_chunks_ids(
    replica: Replica,
) -> None:
    """What stream migration continues a chat stream from (``proxy.dataplane.resumable``): the
    templated prompt's ids beside the first chunk's choices, each token chunk's own ids."""
    body = {"model": replica.model, "messages": _messages(replica), "max_tokens": 3,
            "return_token_ids": True, "ignore_eos": True}  # fmt: skip
    status, whole = await replica.post_json("/v1/chat/completions", body)
    assert status == 200
    async with replica.session.post(
        replica.url + "/v1/chat/completions", json={**body, "stream": True}
    ) as response:
        chunks = [json.loads(event) for event in sse_events(await response.read())[:-1]]
    assert chunks[0]["prompt_token_ids"] == whole["prompt_token_ids"]
    assert all("prompt_token_ids" not in chunk for chunk in chunks[1:])
    ids = [t for chunk in chunks for c in chunk["choices"] for t in c.get("token_ids") or []]
    assert len(ids) == 3


async def test_chat_with_an_unknown_model_is_not_found(replica: Replica) -> None:
    status, answer = await replica.post_json(
        "/v1/chat/completions",
        {"model": replica.unique("nope"), "messages": _messages(replica), "max_tokens": 1},
    )
    assert status == 404
    assert_error(answer, 404, "NotFoundError")


async def test_chat_without_messages_is_a_bad_request(replica: Replica) -> None:
    status, answer = await replica.post_json(
        "/v1/chat/completions", {"model": replica.model, "max_tokens": 1}
    )
    assert status == 400
    assert_error(answer, 400)
