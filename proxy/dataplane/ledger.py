"""What the client of one resumable stream has been sent, and its events as the client gets them.

The replica's server-sent events (``data: {json}`` and ``data: [DONE]``, each ended by a blank
line) are read one by one: the prompt's token ids and each chunk's tokens are counted, and the
ids are stripped when the client did not ask for them. A chunk whose tokens came without text
(vLLM holds text back while a character's bytes are incomplete) is held until text follows, so
that every token the client has is one whose text it also has: a migration drops the held
chunks and regenerates their tokens. After a migration the continuation's chunks (a
``/v1/completions`` stream) are rewritten into the client's stream: its id, creation time and
model, chat chunks for a chat stream, completion logprobs' text offsets counted from the text
already sent, and ``usage`` over the client's own prompt and every token it was sent.
"""

from __future__ import annotations

from typing import Any

import orjson
from aiohttp import web

from proxy.dataplane.resumable import Resumable

Json = dict[str, Any]
END = b"\n\n"
DONE = b"data: [DONE]\n\n"
_CHAT_DELTA = frozenset({"role", "content"})  # anything else (tool calls, reasoning): opaque


class StreamLedger:
    """One resumable stream's account; ``feed`` turns a replica's bytes into the client's."""

    def __init__(self, plan: Resumable) -> None:
        self.plan = plan
        self.response: web.StreamResponse | None = None  # the client's, once prepared
        self.migrations = 0
        self.prompt_ids: list[int] | None = None
        self.sent: list[int] = []  # token ids the client has (with their text)
        self.finished = False  # a finish_reason, or a replica's error event, reached the client
        self.done = False  # ``[DONE]`` reached the client
        self.opaque = False  # the stream carries what a continuation cannot reproduce
        self._buffer = b""
        self._held: list[tuple[bytes, list[int]]] = []  # chunks of tokens without text yet
        self._text = 0  # characters of text the client has
        self._head: Json | None = None  # the client's stream: id, created, model
        self._usage_sent = False
        self._prompt_shown = False  # the client has had the prompt's ids (when it wants ids)
        self._continued = False  # events come from a continuation
        self._base = 0  # tokens, and characters, the client had when the continuation began
        self._text_base = 0

    def open(self, response: web.StreamResponse) -> web.StreamResponse:
        """The client's response, about to be prepared; one that is not a stream of tokens (an
        error status) is copied, never continued."""
        self.response = response
        self.opaque = self.opaque or response.status != 200
        return response

    def feed(self, data: bytes) -> bytes:
        """The client's bytes for ``data`` read from the replica (whole events only)."""
        *events, self._buffer = (self._buffer + data).split(END)
        out = bytearray()
        for event in events:
            out += self._event(event)
        return bytes(out)

    def continue_from(self) -> bytes | None:
        """The replica is gone: the body that continues the stream elsewhere (held chunks
        dropped), or None when the original request is to be sent again as it was (nothing
        but its head reached the client)."""
        self._held.clear()
        self._buffer = b""
        self.migrations += 1
        if self.prompt_ids is None:
            return None
        self._continued = True
        self._base, self._text_base = len(self.sent), self._text
        return self.plan.continuation(self.prompt_ids, self.sent)

    def left(self) -> int | None:
        return self.plan.left(len(self.sent))

    def closing(self) -> bytes:
        """The end of a stream whose last token reached the client before its replica went:
        the usage chunk it asked for, then ``[DONE]``."""
        out = b""
        if self.plan.include_usage and not self._usage_sent and self._head is not None:
            prompt = len(self.prompt_ids or ())
            chunk = {**self._head, "object": self._object(), "choices": []}
            chunk["usage"] = _usage(prompt, len(self.sent))
            out = _encode(chunk)
        return out + DONE

    def announce(self, replica: str) -> bytes:
        """An SSE comment naming the replica that carries the stream on (clients skip it)."""
        return f": X-Rollout-Replica: {replica} (after {len(self.sent)} tokens)\n\n".encode()

    # -- one event --------------------------------------------------------------------------

    def _event(self, event: bytes) -> bytes:
        if not event.startswith(b"data:"):
            return event + END if event.strip() else b""  # comments pass; blank lines do not
        payload = event[5:].strip()
        if payload == b"[DONE]":
            self.done = True
            return self._flush() + DONE
        try:
            chunk = orjson.loads(payload)
        except orjson.JSONDecodeError:
            return event + END
        if not isinstance(chunk, dict):
            return event + END
        if self._continued:
            chunk = self._translated(chunk)
        elif self._head is None:
            self._head = {k: chunk.get(k) for k in ("id", "created", "model")}
        choices = chunk.get("choices")
        if not isinstance(choices, list):  # an error event: the replica's own answer
            self.finished = True
            return self._flush() + event + END
        if not choices:
            self._usage_sent = self._usage_sent or "usage" in chunk
            return self._flush() + _encode(chunk)
        return self._choice(chunk, choices[0])

    def _choice(self, chunk: Json, choice: Json) -> bytes:
        wants = self.plan.wants_ids
        holder = choice if self.plan.kind == "completion" else chunk
        prompt = holder.get("prompt_token_ids")
        if prompt is not None:
            self.prompt_ids = list(prompt)
            if not wants:
                del holder["prompt_token_ids"]
        ids = choice.get("token_ids") or []
        if not wants:
            choice.pop("token_ids", None)
        if self.plan.kind == "completion":
            text = choice.get("text") or ""
        else:
            delta = choice.get("delta") or {}
            text = delta.get("content") or ""
            if any(v is not None and k not in _CHAT_DELTA for k, v in delta.items()):
                self.opaque = True
        finish = choice.get("finish_reason")
        encoded = _encode(chunk)
        if ids and not text and finish is None:
            self._held.append((encoded, list(ids)))
            return b""
        out = self._flush() + encoded
        self.sent += ids
        self._text += len(text)
        self._prompt_shown = self._prompt_shown or prompt is not None
        if finish is not None:
            self.finished = True
        return out

    def _flush(self) -> bytes:
        out = b"".join(event for event, _ in self._held)
        for _, ids in self._held:
            self.sent += ids
        self._held.clear()
        return out

    def _translated(self, chunk: Json) -> Json:
        """A continuation's chunk (``/v1/completions``) as the client's stream has them."""
        head = self._head or {k: chunk.get(k) for k in ("id", "created", "model")}
        out: Json = {**chunk, **head, "object": self._object()}
        usage = chunk.get("usage")
        if isinstance(usage, dict):  # the continuation's prompt is the client's prompt + sent
            completion = self._base + _int(usage, "completion_tokens")
            out["usage"] = _usage(len(self.prompt_ids or ()), completion)
        choices = chunk.get("choices")
        if not isinstance(choices, list) or not choices:
            return out
        choice = dict(choices[0])
        choice["index"] = 0
        choice.pop("prompt_token_ids", None)
        if self.plan.wants_ids and not self._prompt_shown and self.prompt_ids is not None:
            choice["prompt_token_ids"] = self.prompt_ids  # the client's first token chunk
        logprobs = choice.get("logprobs")
        if isinstance(logprobs, dict) and isinstance(logprobs.get("text_offset"), list):
            shift = self._text_base
            logprobs["text_offset"] = [offset + shift for offset in logprobs["text_offset"]]
        if self.plan.kind == "chat":
            choice = _as_chat(choice)
            if "prompt_token_ids" in choice:
                out["prompt_token_ids"] = choice.pop("prompt_token_ids")
        out["choices"] = [choice]
        return out

    def _object(self) -> str:
        return "text_completion" if self.plan.kind == "completion" else "chat.completion.chunk"


def _as_chat(choice: Json) -> Json:
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


def _usage(prompt: int, completion: int) -> Json:
    total = prompt + completion
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": total}


def _int(mapping: Json, key: str) -> int:
    value = mapping.get(key)
    return value if isinstance(value, int) else 0


def _encode(chunk: Json) -> bytes:
    return b"data: " + orjson.dumps(chunk) + END
