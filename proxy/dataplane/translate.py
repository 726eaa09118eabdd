"""A continuation's chunk as the client's stream has it: a pure function of the chunk and of what
the client had when the continuation began.

A continuation is a streamed ``/v1/completions`` request (``resumable``); the client's stream may
be a completion or a chat stream. Each chunk of the continuation takes the client's ``id``,
``created`` and ``model`` and its ``object``; its choice becomes choice 0, loses the
continuation's prompt ids (its prompt is the client's prompt plus the tokens already sent) and,
for a client that asked for ids and has not had the prompt's yet, gains the client's; completion
logprobs' text offsets count from the text the client already had; for a chat stream the choice
becomes a chat delta. A ``usage`` counts the client's own prompt and every token it was sent.
Cost: one shallow copy of the chunk and of its choice.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from proxy.dataplane.resumable import Kind

Json = dict[str, Any]


@dataclass(frozen=True, slots=True)
class Client:
    """The client's stream when a continuation began."""

    kind: Kind
    head: Json  # the client's ``id``, ``created`` and ``model``
    prompt: int  # tokens of the client's prompt
    tokens: int  # tokens the client had
    chars: int  # characters of text the client had (what its logprobs' text offsets count)


def translate(chunk: Json, client: Client, show_prompt: list[int] | None = None) -> Json:
    """``chunk`` of the continuation as the client gets it; ``show_prompt``: the prompt's ids to
    put on it (the client asked for ids and has not had these)."""
    out: Json = {**chunk, **client.head, "object": object_of(client.kind)}
    counted = chunk.get("usage")
    if isinstance(counted, dict):  # the continuation's prompt is the client's prompt + sent
        out["usage"] = usage(client.prompt, client.tokens + _int(counted, "completion_tokens"))
    choices = chunk.get("choices")
    if not isinstance(choices, list) or not choices:
        return out
    choice = dict(choices[0])
    choice["index"] = 0
    choice.pop("prompt_token_ids", None)
    if show_prompt is not None:
        choice["prompt_token_ids"] = show_prompt
    logprobs = choice.get("logprobs")
    if isinstance(logprobs, dict) and isinstance(logprobs.get("text_offset"), list):
        shift = client.chars
        logprobs = choice["logprobs"] = dict(logprobs)
        logprobs["text_offset"] = [offset + shift for offset in logprobs["text_offset"]]
    if client.kind == "chat":
        choice = as_chat(choice)
        if "prompt_token_ids" in choice:  # a chat stream has them beside its choices
            out["prompt_token_ids"] = choice.pop("prompt_token_ids")
    out["choices"] = [choice]
    return out


def as_chat(choice: Json) -> Json:
    """A completion choice as a chat stream's choice: its text as the delta's content."""
    chat: Json = {
        "index": 0,
        "delta": {"content": choice.get("text") or ""},
        "logprobs": None,
        "finish_reason": choice.get("finish_reason"),
    }
    for key in ("stop_reason", "token_ids", "prompt_token_ids"):
        if key in choice:
            chat[key] = choice[key]
    return chat


def object_of(kind: Kind) -> str:
    return "text_completion" if kind == "completion" else "chat.completion.chunk"


def usage(prompt: int, completion: int) -> Json:
    total = prompt + completion
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": total}


def _int(mapping: Json, key: str) -> int:
    value = mapping.get(key)
    return value if isinstance(value, int) else 0
