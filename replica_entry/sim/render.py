"""The JSON vLLM answers generation requests with, built from a ``Generation``.

Non-streamed answers are one ``text_completion`` or ``chat.completion`` object; streamed
answers are ``data: <chunk>`` events, one per generated token and choice (the token that ends
a choice carries its ``finish_reason``), a chat stream opening each choice with a role delta.
Field sets follow vLLM's response models, ``null`` where vLLM leaves a field unset.
Choices are numbered prompt-major: prompt ``p``'s choice ``c`` is ``p * n + c``.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from replica_entry.sim.generation import Generation, Sequence
from replica_entry.sim.tokenizer import decode, piece

Json = dict[str, Any]


@dataclass(frozen=True, slots=True)
class Meta:
    """The fields every object and chunk of one answer shares."""

    id: str
    created: int
    model: str

    @staticmethod
    def new(kind: str, model: str) -> Meta:
        prefix = "cmpl" if kind == "completion" else "chatcmpl"
        return Meta(f"{prefix}-{uuid.uuid4().hex}", int(time.time()), model)

    def envelope(self, obj: str, choices: list[Json]) -> Json:
        return {
            "id": self.id,
            "object": obj,
            "created": self.created,
            "model": self.model,
            "choices": choices,
        }


def usage(gen: Generation, cached_tokens: int) -> Json:
    prompt_tokens = sum(len(prompt) for prompt in gen.job.prompts)
    completion_tokens = gen.generated_tokens()
    return {
        "prompt_tokens": prompt_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "completion_tokens": completion_tokens,
        "prompt_tokens_details": {"cached_tokens": cached_tokens},
    }


def completion_body(gen: Generation, meta: Meta) -> Json:
    choices = []
    for seq in gen.sequences:
        ids = list(seq.sampled.token_ids[: gen.emitted(seq)])
        choices.append(
            {
                "index": seq.index,
                "text": decode(ids),
                "logprobs": _completion_logprobs(gen, seq, 0, len(ids)),
                "finish_reason": gen.finish_reason(seq),
                "stop_reason": None,
                "prompt_logprobs": None,
                "prompt_token_ids": _prompt_ids(gen, seq) if gen.job.return_token_ids else None,
                "token_ids": ids if gen.job.return_token_ids else None,
            }
        )
    # vLLM reports the cache hit of the batch's last prompt in a non-streamed answer.
    body = meta.envelope("text_completion", choices)
    body.update(usage=usage(gen, gen.cached[-1]), system_fingerprint=None)
    return body


def chat_body(gen: Generation, meta: Meta) -> Json:
    choices = []
    for seq in gen.sequences:
        ids = list(seq.sampled.token_ids[: gen.emitted(seq)])
        message = {"role": "assistant", "content": decode(ids), "tool_calls": []}
        choices.append(
            {
                "index": seq.index,
                "message": message,
                "logprobs": _chat_logprobs(gen, seq, 0, len(ids)),
                "finish_reason": gen.finish_reason(seq),
                "stop_reason": None,
                "token_ids": ids if gen.job.return_token_ids else None,
            }
        )
    body = meta.envelope("chat.completion", choices)
    body.update(
        usage=usage(gen, gen.cached[-1]),
        system_fingerprint=None,
        prompt_logprobs=None,
        prompt_token_ids=list(gen.job.prompts[0]) if gen.job.return_token_ids else None,
    )
    return body


def role_chunks(gen: Generation, meta: Meta) -> list[Json]:
    """The opening chunk of each choice of a chat stream; with ``return_token_ids`` vLLM puts
    the templated prompt's ids on these chunks (beside ``choices``)."""
    delta = {"role": "assistant", "content": ""}
    chunks = []
    for seq in gen.sequences:
        choice = {"index": seq.index, "delta": delta, "logprobs": None, "finish_reason": None}
        chunk = meta.envelope("chat.completion.chunk", [choice])
        if gen.job.return_token_ids:
            chunk["prompt_token_ids"] = _prompt_ids(gen, seq)
        chunks.append(chunk)
    return chunks


def token_chunks(gen: Generation, meta: Meta, start: int, end: int) -> list[Json]:
    """Chunks for decode steps ``start .. end - 1``, choice by choice within a step."""
    return [
        _token_chunk(gen, meta, seq, step)
        for step in range(start, end)
        for seq in gen.sequences
        if step < gen.emitted(seq)
    ]


def abort_chunks(gen: Generation, meta: Meta) -> list[Json]:
    """A closing chunk for each choice that an abort ended before its budget."""
    return [
        _abort_chunk(gen, meta, seq)
        for seq in gen.sequences
        if gen.aborted and gen.emitted(seq) < seq.budget
    ]


def usage_chunk(gen: Generation, meta: Meta) -> Json:
    obj = "text_completion" if gen.job.kind == "completion" else "chat.completion.chunk"
    # vLLM reports the first prompt's cache hit in a stream.
    chunk = meta.envelope(obj, [])
    chunk["usage"] = usage(gen, gen.cached[0])
    return chunk


def _token_chunk(gen: Generation, meta: Meta, seq: Sequence, step: int) -> Json:
    token = seq.sampled.token_ids[step]
    ids = [token] if gen.job.return_token_ids else None
    last = step + 1 == seq.budget
    choice: Json = {"index": seq.index}
    if gen.job.kind == "completion":
        prompt_ids = _prompt_ids(gen, seq) if gen.job.return_token_ids and step == 0 else None
        choice |= {
            "text": piece(token),
            "logprobs": _completion_logprobs(gen, seq, step, step + 1),
            "finish_reason": "length" if last else None,
            "stop_reason": None,
            "prompt_token_ids": prompt_ids,
            "token_ids": ids,
        }
        return meta.envelope("text_completion", [choice])
    choice |= {
        "delta": {"content": piece(token)},
        "logprobs": _chat_logprobs(gen, seq, step, step + 1),
        "finish_reason": "length" if last else None,
        "token_ids": ids,
    }
    return meta.envelope("chat.completion.chunk", [choice])


def _abort_chunk(gen: Generation, meta: Meta, seq: Sequence) -> Json:
    if gen.job.kind == "completion":
        choice = {"index": seq.index, "text": "", "logprobs": None, "finish_reason": "abort"}
        return meta.envelope("text_completion", [choice])
    choice = {"index": seq.index, "delta": {}, "logprobs": None, "finish_reason": "abort"}
    return meta.envelope("chat.completion.chunk", [choice])


def _prompt_ids(gen: Generation, seq: Sequence) -> list[int]:
    return list(gen.job.prompts[seq.prompt_index])


def _completion_logprobs(gen: Generation, seq: Sequence, start: int, end: int) -> Json | None:
    """vLLM's ``CompletionLogProbs`` for tokens ``start .. end - 1``: the sampled token and
    ``logprobs`` alternatives per step; text offsets count from the choice's start."""
    k = gen.job.top_logprobs
    if k is None:
        return None
    sampled, name = seq.sampled, _namer(gen)
    return {
        "text_offset": gen.text_offsets(seq)[start:end],
        "token_logprobs": list(sampled.logprobs[start:end]),
        "tokens": [name(t) for t in sampled.token_ids[start:end]],
        "top_logprobs": [
            {name(t): lp for t, lp in step[: k + 1]} for step in sampled.top[start:end]
        ],
    }


def _namer(gen: Generation) -> Callable[[int], str]:
    """How a logprob names its token: its text, or ``token_id:N`` when the request asked
    ``return_tokens_as_token_ids`` (vLLM's form)."""
    return (lambda token: f"token_id:{token}") if gen.job.tokens_as_ids else piece


def _chat_logprobs(gen: Generation, seq: Sequence, start: int, end: int) -> Json | None:
    k = gen.job.top_logprobs
    if k is None:
        return None
    sampled, name = seq.sampled, _namer(gen)
    content = []
    for token, lp, step in zip(
        sampled.token_ids[start:end],
        sampled.logprobs[start:end],
        sampled.top[start:end],
        strict=True,
    ):
        top = [_chat_entry(t, alt, name) for t, alt in step[:k]]
        content.append({**_chat_entry(token, lp, name), "top_logprobs": top})
    return {"content": content}


def _chat_entry(token: int, logprob: float, name: Callable[[int], str]) -> Json:
    text = name(token)
    return {"token": text, "logprob": logprob, "bytes": list(piece(token).encode())}
