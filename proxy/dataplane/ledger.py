"""What the client of one resumable stream has been sent, kept on bytes until a cut.

The replica's reads are written back as whole server-sent events only, so a cut never leaves the
client half an event. A read that is one event as vLLM writes it (``sse.Framer.single``) is taken
as it came: a token chunk is read on its bytes (``scan``), its ids appended, unparsed, to those
the client has, and the ids the proxy asked for on the client's behalf spliced out; the usage
chunk and ``[DONE]`` are told by their bytes. Any other read is cut into events by the framer
(CRLF, CR, comments, data over several lines, events split between reads), each read the same
way or, when the scan does not recognise it, parsed (orjson): a chat stream's role chunk, an
error event, and every chunk of a continuation, which is rewritten into the client's stream
(``translate``). A chunk whose tokens came without text (vLLM holds text back while a
character's bytes are incomplete) is held until text follows, so that every token the client
has is one whose text it also has: a migration drops the held chunks and regenerates their
tokens. Comments and fields other than ``data`` pass (LF line ends), those inside an event
before its data; an event without data (a keep-alive comment) passes alone.

Kept per stream until a cut: the ids the client has (bytes), the prompt's ids (bytes), a chunk
of the replica's (the stream's id, creation time and model) and the last chunk with tokens the
client was sent (the text it has: its logprobs' first text offset plus its text). A cut parses
them (``continue_from``); ids that do not read as integers make the stream not resumable.
Cost of a token chunk as vLLM writes it: the framer's check and the scan's finds over its
bytes, and an append; no JSON is loaded or dumped and nothing is copied but the ids.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import orjson

from proxy.dataplane.resumable import Resumable
from proxy.dataplane.scan import Scan, scan
from proxy.dataplane.sse import Event, Framer, encode
from proxy.dataplane.translate import Client, object_of, translate, usage

Json = dict[str, Any]
DONE = b"data: [DONE]\n\n"
_NO_CHOICES, _USAGE = b',"choices":[],', b',"usage":'  # the usage chunk, on its bytes
_CHAT_DELTA = frozenset({"role", "content"})  # anything else (tool calls, reasoning): opaque


class _Held(NamedTuple):
    event: bytes  # as the client will get it
    ids: bytes
    payload: bytes
    prompt: bool  # it carries the prompt's ids


class StreamLedger:
    """One resumable stream's account; ``feed`` turns a replica's bytes into the client's."""

    def __init__(self, plan: Resumable) -> None:
        self.plan = plan
        self.migrations = 0
        self.finished = False  # a finish_reason, or a replica's error event, reached the client
        self.done = False  # ``[DONE]`` reached the client
        self._opaque = False  # what a continuation cannot reproduce reached the client
        self._framer = Framer()
        self._chat = plan.kind == "chat"
        self._strip = not plan.wants_ids
        self._ids: list[bytes] = []  # the ids the client has (with their text), unparsed
        self._prompt: bytes | None = None  # the prompt's ids, a JSON list
        self._held: list[_Held] = []  # chunks of tokens without text yet
        self._first: bytes | None = None  # a chunk of the replica's: the stream's head
        self._last: bytes | None = None  # the last chunk with tokens the client was sent
        self._usage_sent = False
        self._prompt_shown = False  # the client has had the prompt's ids (when it wants ids)
        self._client: Client | None = None  # after a cut: the chunks are a continuation's
        self._quick = True  # a read may pass the framer by: no continuation, nothing held

    def opened(self, status: int) -> None:
        """The client's response has ``status``: one that is not a stream of tokens (an error
        status) is copied, never continued."""
        self._opaque = self._opaque or status != 200

    @property
    def opaque(self) -> bool:
        """The stream carries what a continuation cannot reproduce, or ids that do not read as
        token ids (parsed: for a cut)."""
        prompt = self._prompt
        return (
            self._opaque
            or _ids(self._ids) is None
            or (prompt is not None and _ids([prompt[1:-1]]) is None)
        )

    @property
    def sent(self) -> list[int]:
        """The token ids the client has (parsed: for a cut)."""
        return _ids(self._ids) or []

    @property
    def prompt_ids(self) -> list[int] | None:
        """The prompt's token ids, once a chunk brought them (parsed: for a cut)."""
        return None if self._prompt is None else _ids([self._prompt[1:-1]])

    def feed(self, data: bytes) -> bytes:
        """The client's bytes for ``data`` read from the replica (whole events only). The
        common read, one event as vLLM writes it (a token chunk whose tokens have their text,
        the usage chunk, ``[DONE]``), is taken whole, as it came or with the ids spliced out;
        anything else goes through the framer."""
        if self._quick and self._framer.single(data):
            found = scan(data, self._chat, self._strip, self._strip or self._prompt is None)
            if found is not None and not found[3]:
                event, ids, prompt, _, finished = found
                if prompt is not None:  # the first chunk
                    self._prompt, self._prompt_shown = prompt, True
                    self._first = self._first or event
                if ids:
                    self._ids.append(ids)
                    self._last = event
                if finished:
                    self.finished = True
                return event
            if data == DONE:
                self.done = True
                return data
            if _NO_CHOICES in data and _USAGE in data:
                self._usage_sent = True
                return data
        out = b"".join([self._event(event) for event in self._framer.feed(data)])
        self._quick = not self._held and self._client is None
        return out

    def continue_from(self) -> bytes | None:
        """The replica is gone: the body that continues the stream elsewhere (held chunks
        dropped), or None when the original request is to be sent again as it was (nothing
        but its head reached the client)."""
        self._held.clear()
        self._framer = Framer()
        self._quick = False
        self.migrations += 1
        prompt = self.prompt_ids
        if prompt is None:
            return None
        sent = self.sent
        self._client = Client(self.plan.kind, self._head(), len(prompt), len(sent), self._chars())
        return self.plan.continuation(prompt, sent)

    def left(self) -> int | None:
        return self.plan.left(len(self.sent))

    def closing(self) -> bytes:
        """The end of a stream whose last token reached the client before its replica went:
        the usage chunk it asked for, then ``[DONE]``."""
        out = b""
        head = self._first or self._last
        if self.plan.include_usage and not self._usage_sent and head is not None:
            chunk = {**self._head(), "object": object_of(self.plan.kind), "choices": []}
            chunk["usage"] = usage(len(self.prompt_ids or ()), len(self.sent))
            out = encode(orjson.dumps(chunk))
        return out + DONE

    def announce(self, replica: str) -> bytes:
        """An SSE comment naming the replica that carries the stream on (clients skip it)."""
        return f": X-Rollout-Replica: {replica} (after {len(self.sent)} tokens)\n\n".encode()

    # -- one event --------------------------------------------------------------------------

    def _event(self, event: Event) -> bytes:
        payload, lines = event
        if payload is None:
            return lines + b"\n"
        if self._client is None:
            found = scan(payload, self._chat, self._strip, True)
            if found is not None:
                return self._tokens(found, payload, lines)
        if payload.strip() == b"[DONE]":
            self.done = True
            return self._flush() + lines + DONE
        return self._parsed(payload, lines)

    def _tokens(self, found: Scan, original: bytes, lines: bytes) -> bytes:
        """A token chunk read on its bytes."""
        payload, ids, prompt, held, finished = found
        if self._first is None:
            self._first = original
        if prompt is not None:
            self._prompt = prompt
        event = encode(payload, lines)
        if held:
            self._held.append(_Held(event, ids, payload, prompt is not None))
            return b""
        out = self._flush() + event if self._held else event
        if ids:
            self._add(ids, payload)
        self._prompt_shown = self._prompt_shown or prompt is not None
        self.finished = self.finished or finished
        return out

    def _parsed(self, payload: bytes, lines: bytes) -> bytes:
        try:
            chunk = orjson.loads(payload)
        except orjson.JSONDecodeError:
            return encode(payload, lines)
        if not isinstance(chunk, dict):
            return encode(payload, lines)
        if self._client is not None:
            chunk = translate(chunk, self._client, self._show_prompt())
        elif self._first is None:
            self._first = payload
        choices = chunk.get("choices")
        if not isinstance(choices, list):  # an error event: the replica's own answer
            self.finished = True
            return self._flush() + encode(payload, lines)
        if not choices:
            self._usage_sent = self._usage_sent or "usage" in chunk
            return self._flush() + encode(orjson.dumps(chunk), lines)
        return self._choice(chunk, choices[0], lines)

    def _choice(self, chunk: Json, choice: Json, lines: bytes) -> bytes:
        holder = chunk if self._chat else choice
        prompt = holder.get("prompt_token_ids")
        if prompt is not None:
            self._prompt = orjson.dumps(prompt)
            if self._strip:
                del holder["prompt_token_ids"]
        ids = choice.get("token_ids") or []
        if self._strip:
            choice.pop("token_ids", None)
        if self._chat:
            delta = choice.get("delta") or {}
            text = delta.get("content") or ""
            if any(v is not None and k not in _CHAT_DELTA for k, v in delta.items()):
                self._opaque = True
        else:
            text = choice.get("text") or ""
        finish = choice.get("finish_reason")
        payload = orjson.dumps(chunk)
        held = _Held(encode(payload, lines), orjson.dumps(ids)[1:-1], payload, prompt is not None)
        if ids and not text and finish is None:
            self._held.append(held)
            return b""
        out = self._flush() + held.event
        self._count(held)
        if finish is not None:
            self.finished = True
        return out

    def _count(self, chunk: _Held) -> None:
        """``chunk`` reached the client."""
        if chunk.ids:
            self._add(chunk.ids, chunk.payload)
        self._prompt_shown = self._prompt_shown or chunk.prompt

    def _add(self, ids: bytes, payload: bytes) -> None:
        """The client has the tokens ``ids`` of ``payload``."""
        self._ids.append(ids)
        self._last = payload

    def _flush(self) -> bytes:
        out = b"".join(held.event for held in self._held)
        for held in self._held:
            self._count(held)
        self._held.clear()
        return out

    # -- at a cut ---------------------------------------------------------------------------

    def _head(self) -> Json:
        """The stream's id, creation time and model, from any chunk of the replica's."""
        seen = self._first or self._last
        first = orjson.loads(seen.removeprefix(b"data: ")) if seen else {}
        return {key: first.get(key) for key in ("id", "created", "model")}

    def _chars(self) -> int:
        """Characters of text the client has, from the last chunk with tokens it was sent:
        its logprobs' first text offset (vLLM counts them from the choice's start) plus its
        text. Only completion logprobs' offsets are rewritten, so 0 without them."""
        chunk = orjson.loads(self._last.removeprefix(b"data: ")) if self._last else {}
        choices = chunk.get("choices") or [{}]
        choice = choices[0] if isinstance(choices[0], dict) else {}
        logprobs = choice.get("logprobs")
        offsets = logprobs.get("text_offset") if isinstance(logprobs, dict) else None
        text = choice.get("text")
        if not offsets or not isinstance(offsets[0], int) or not isinstance(text, str):
            return 0
        return offsets[0] + len(text)

    def _show_prompt(self) -> list[int] | None:
        """The prompt's ids for a continuation's chunk: the client wants ids and has not had
        these."""
        return None if self._strip or self._prompt_shown else self.prompt_ids


def _ids(parts: list[bytes]) -> list[int] | None:
    """The token ids of ``parts`` (each the inside of a JSON list); None: they do not read as
    token ids (the stream is not continued)."""
    try:
        ids = orjson.loads(b"[" + b",".join(parts) + b"]")
    except orjson.JSONDecodeError:
        return None
    return ids if all(type(i) is int for i in ids) else None
