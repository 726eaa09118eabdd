"""The byte scan of vLLM's token chunks (``proxy.dataplane.scan``): whatever it recognises, it
reads as a JSON parser would; what it does not recognise is left to the parser."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from benchmarks.micro.stream import chunks
from proxy.dataplane.scan import scan

# Strings that look like the keys the scan looks for, to put where a key must not be taken.
TRICKY = ('"', "\\", '\\"}', '"}', ',"text":"', ',"token_ids":[7]', ',"finish_reason":null',
          ',"delta":{"content":"', ',"prompt_token_ids":[1]', "token_ids", "finish_reason",
          "text", "]", "data: ")  # fmt: skip
TEXT = st.one_of(st.text(max_size=6), st.sampled_from(TRICKY))
IDS = st.lists(st.integers(0, 200_000), max_size=3)
FINISH = st.sampled_from([None, None, "length", "stop"])


@st.composite
def completion(draw: st.DrawFn) -> dict[str, Any]:
    token = draw(TEXT)
    logprobs = draw(
        st.none()
        | st.just(
            {
                "text_offset": [0],
                "token_logprobs": [-1.0],
                "tokens": [token],
                "top_logprobs": [{token: -1.0, draw(TEXT): -2.0}],
            }
        )
    )
    choice = {"index": 0, "text": draw(TEXT), "logprobs": logprobs, "finish_reason": draw(FINISH),
              "stop_reason": None, "prompt_token_ids": draw(st.none() | IDS),
              "token_ids": draw(st.none() | IDS)}  # fmt: skip
    if draw(st.booleans()):
        del choice["token_ids"]
    return {"id": draw(TEXT), "object": "text_completion", "created": 1, "model": draw(TEXT),
            "choices": [choice], "usage": None}  # fmt: skip


@st.composite
def chat(draw: st.DrawFn) -> dict[str, Any]:
    delta = draw(
        st.sampled_from(
            [
                {"content": draw(TEXT)},
                {"role": "assistant", "content": ""},
                {},
                {"reasoning_content": draw(TEXT)},
                {"content": draw(TEXT), "tool_calls": []},
                {"content": draw(TEXT), "reasoning_content": draw(TEXT)},
            ]
        )
    )
    choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": draw(FINISH),
              "token_ids": draw(st.none() | IDS)}  # fmt: skip
    if draw(st.booleans()):
        del choice["token_ids"]
    chunk = {"id": draw(TEXT), "object": "chat.completion.chunk", "created": 1,
             "model": draw(TEXT), "choices": [choice]}  # fmt: skip
    prompt = draw(st.none() | IDS)
    return chunk if prompt is None else {**chunk, "prompt_token_ids": prompt}


def check(chunk: dict[str, Any], is_chat: bool, strip: bool) -> bool:
    """Whether ``scan`` recognised ``chunk``; asserts that what it read is what a parse reads."""
    data = orjson.dumps(chunk)
    chunk = orjson.loads(data)  # a copy to take the ids from
    found = scan(data, is_chat, strip, True)
    if found is None:
        return False
    payload, ids, prompt, held, finished = found
    choice = chunk["choices"][0]
    holder = chunk if is_chat else choice
    text = choice["delta"].get("content") if is_chat else choice["text"]
    assert orjson.loads(b"[" + ids + b"]") == (choice.get("token_ids") or [])
    assert (None if prompt is None else orjson.loads(prompt)) == holder.get("prompt_token_ids")
    assert finished == (choice["finish_reason"] is not None)
    assert held == (bool(choice.get("token_ids")) and not text and not finished)
    if is_chat:
        assert set(choice["delta"]) <= {"role", "content"}, "tool calls, reasoning: parsed"
    if strip:
        choice.pop("token_ids", None)
        if holder.get("prompt_token_ids") is not None:
            del holder["prompt_token_ids"]
    assert orjson.loads(payload) == chunk
    framed = scan(b"data: " + data + b"\n\n", is_chat, strip, True)
    assert framed is not None
    assert framed[0] == b"data: " + payload + b"\n\n"
    assert framed[1:] == found[1:]
    return True


@given(completion(), st.booleans())
def test_a_completion_chunk_is_read_as_its_parse_reads_it(
    chunk: dict[str, Any], strip: bool
) -> None:
    """Fails when a key's bytes inside a string (a text, a token in the logprobs, a model name)
    are taken for the key, when ``"prompt_token_ids"`` is taken for ``"token_ids"``, and when
    the ids spliced out leave the JSON broken or take a neighbour with them."""
    check(chunk, False, strip)


@given(chat(), st.booleans())
def test_a_chat_chunk_is_read_as_its_parse_reads_it(chunk: dict[str, Any], strip: bool) -> None:
    """Fails when an escaped quote is taken for the end of the content (a delta with reasoning
    or tool calls after it would pass unseen: such a stream must not be continued)."""
    check(chunk, True, strip)


def test_vllm_token_chunks_are_recognised() -> None:
    """Fails when the fast path never fires (every chunk parsed, the cost this removes)."""
    choice = {"index": 0, "text": " a", "logprobs": None, "finish_reason": None,
              "stop_reason": None, "prompt_token_ids": [1, 2], "token_ids": [5]}  # fmt: skip
    chunk = {"id": "c", "object": "text_completion", "created": 1, "model": "m",
             "choices": [choice], "usage": None}  # fmt: skip
    assert check(chunk, False, True)
    assert check(
        {**chunk, "choices": [{**choice, "text": "", "finish_reason": "length"}]}, False, False
    )
    delta = {"index": 0, "delta": {"content": 'say "hi"\\'}, "logprobs": None,
             "finish_reason": None, "token_ids": [5, 6]}  # fmt: skip
    assert check({"id": "c", "created": 1, "model": "m", "choices": [delta]}, True, True)
    role = {"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None,
            "finish_reason": None}  # fmt: skip
    opening = {"id": "c", "created": 1, "model": "m", "choices": [role], "prompt_token_ids": [1]}
    assert check(opening, True, True)  # a chat stream's first chunk: its prompt's ids, no tokens


def test_what_is_not_vllms_shape_is_left_to_the_parser() -> None:
    """Fails when the scan guesses at keys written otherwise than vLLM writes them, at ids that
    are not a list or not where vLLM puts them (they would go uncounted), or at a delta with
    tool calls (such a stream is not continued)."""
    spaced = b'{"choices": [{"index": 0, "text": "a", "finish_reason": null, "token_ids": [1]}]}'
    assert scan(spaced, False, False, True) is None
    no_ids = b'{"choices":[{"index":0,"text":"a","finish_reason":null,"token_ids":null}]}'
    assert scan(no_ids, False, False, True) is None
    tools = (
        b'{"choices":[{"index":0,"delta":{"content":"","tool_calls":[]},'
        b'"finish_reason":null,"token_ids":[]}]}'
    )
    assert scan(tools, True, False, True) is None
    ids_first = b'{"choices":[{"index":0,"token_ids":[1],"text":"a","finish_reason":null}]}'
    assert scan(ids_first, False, False, True) is None  # its ids are not after the finish


@pytest.mark.parametrize(
    ("kind", "logprobs"), [("completion", False), ("completion", True), ("chat", False)]
)
def test_the_micro_benchmarks_chunks_are_read_on_their_bytes(kind: str, logprobs: bool) -> None:
    """``benchmarks.micro.stream`` times the fast path: fails when its chunks drift from the
    shape the scan recognises (it would time the parse instead)."""
    reads = chunks(kind, [1, 2, 3], 5, logprobs, seed=0)[-7:-2]  # the token chunks
    assert all(scan(read, kind == "chat", True, True) is not None for read in reads)
