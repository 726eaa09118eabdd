"""A continuation's chunk as the client's stream has it (``proxy.dataplane.translate``): pure."""

from __future__ import annotations

import copy
from typing import Any

from proxy.dataplane.translate import Client, as_chat, translate

HEAD = {"id": "cmpl-a", "created": 1, "model": "m"}


def continued(**choice: Any) -> dict[str, Any]:
    base = {"index": 3, "text": " b", "token_ids": [6], "prompt_token_ids": [1, 2, 3, 5],
            "finish_reason": None}  # fmt: skip
    return {"id": "cmpl-x", "created": 9, "model": "m", "object": "text_completion",
            "choices": [{**base, **choice}]}  # fmt: skip


def test_a_completion_chunk_takes_the_clients_head_and_offsets() -> None:
    """Fails when the continuation's own id, choice index or prompt ids reach the client, or
    when its text offsets count from the continuation's start, or when the chunk given is
    changed in place (the function is pure)."""
    logprobs = {"text_offset": [0, 2], "tokens": [" b", "c"]}
    chunk = continued(logprobs=logprobs)
    before = copy.deepcopy(chunk)
    out = translate(chunk, Client("completion", HEAD, 3, 1, 7))
    assert chunk == before
    assert {k: out[k] for k in ("id", "created", "model", "object")} == {
        **HEAD, "object": "text_completion"
    }  # fmt: skip
    (choice,) = out["choices"]
    assert choice["index"] == 0
    assert "prompt_token_ids" not in choice
    assert choice["logprobs"]["text_offset"] == [7, 9]
    assert choice["token_ids"] == [6]


def test_the_prompt_is_shown_where_the_client_wants_it_once() -> None:
    """Fails when a chat client gets the prompt's ids inside its choice instead of beside it."""
    out = translate(continued(), Client("completion", HEAD, 3, 1, 2), show_prompt=[1, 2, 3])
    assert out["choices"][0]["prompt_token_ids"] == [1, 2, 3]
    chat = translate(continued(), Client("chat", HEAD, 3, 1, 2), show_prompt=[1, 2, 3])
    assert chat["prompt_token_ids"] == [1, 2, 3]  # beside the choices, as vLLM's chat has it
    assert "prompt_token_ids" not in chat["choices"][0]


def test_a_chat_stream_gets_chat_chunks() -> None:
    """Fails when a chat client gets completion choices (``text``, completion logprobs)."""
    out = translate(
        continued(finish_reason="length", stop_reason=None), Client("chat", HEAD, 3, 1, 0)
    )
    assert out["object"] == "chat.completion.chunk"
    assert out["choices"] == [
        {"index": 0, "delta": {"content": " b"}, "logprobs": None, "finish_reason": "length",
         "stop_reason": None, "token_ids": [6]}
    ]  # fmt: skip
    assert as_chat({"text": None, "finish_reason": None})["delta"] == {"content": ""}


def test_usage_counts_the_clients_prompt_and_every_token_it_was_sent() -> None:
    """Fails when usage counts the continuation's prompt (the client's prompt plus the tokens
    before the cut) or only the continuation's tokens."""
    usage = {"prompt_tokens": 40, "completion_tokens": 2, "total_tokens": 42}
    chunk = {"id": "x", "created": 9, "model": "m", "choices": [], "usage": usage}
    out = translate(chunk, Client("completion", HEAD, 30, 10, 0))
    assert out["usage"] == {"prompt_tokens": 30, "completion_tokens": 12, "total_tokens": 42}
    assert out["choices"] == []
    error = translate({"error": {"message": "no"}}, Client("chat", HEAD, 1, 1, 0))
    assert error["error"] == {"message": "no"}
    assert error["id"] == "cmpl-a"
