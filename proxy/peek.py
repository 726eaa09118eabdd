"""Read what routing needs from a generation body without parsing the whole of it.

The body is forwarded as the bytes it came in; the proxy only needs ``model``, ``stream`` and
where the prompt (``prompt`` or ``messages``) lies. The scanner walks the top-level object with
compiled regular expressions and ``bytes.find``, so its cost grows with the number of top-level
keys, not with the prompt: a flat token-id list is skipped with three C-level scans.

Contract:
- a body that is not a JSON object, or whose ``model``/prompt has the wrong type, raises
  ``BadBody`` with a message for the client (answered 400);
- anything malformed beyond what routing reads (inside the prompt list, other fields) is left
  for the replica to report, as vLLM would;
- if the fast scanner meets JSON it cannot walk, the body is parsed with orjson and re-serialised,
  and the spans refer to that canonical copy (``Peek.buffer``); correctness never depends on the
  fast path.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

import orjson

PromptKind = Literal["tokens", "text", "batch_tokens", "batch_text", "messages", "empty"]

_WS = re.compile(rb"[ \t\r\n]*")
_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"', re.DOTALL)
_SCALAR = re.compile(rb"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?|true|false|null")
_STRUCT = re.compile(rb'["\[\]{}]')
_CLOSER = {ord("["): ord("]"), ord("{"): ord("}")}
_MAX_DEPTH = 512


class BadBody(ValueError):
    """The body cannot be routed; the message says what was wrong (answered 400)."""

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param


class _ScanError(Exception):
    """The fast scanner could not walk the body (malformed, or a shape it does not handle)."""


@dataclass(frozen=True, slots=True)
class Peek:
    """What routing reads from one generation request."""

    model: str | None
    stream: bool
    kind: PromptKind
    buffer: bytes  # the bytes ``start``/``end`` index (the original body on the fast path)
    start: int
    end: int


def peek_generation(body: bytes, prompt_key: bytes) -> Peek:
    """Scan ``body`` for ``model``, ``stream`` and the span of ``prompt_key``'s value."""
    try:
        found = _scan(body, prompt_key)
        buffer = body
    except _ScanError:
        buffer = _canonical(body)
        try:
            found = _scan(buffer, prompt_key)
        except _ScanError as exc:  # pragma: no cover - orjson output always scans
            raise BadBody(f"request body could not be read: {exc}") from None
    model, stream, span = found
    name = prompt_key.decode()
    if span is None:
        raise BadBody(f"'{name}' is required", param=name)
    kind = _classify(buffer, span[0], prompt_key)
    return Peek(model, stream, kind, buffer, span[0], span[1])


def _canonical(body: bytes) -> bytes:
    try:
        value = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise BadBody(f"request body is not valid JSON: {exc}") from None
    if not isinstance(value, dict):
        raise BadBody("request body must be a JSON object")
    return orjson.dumps(value)


_Found = tuple[str | None, bool, tuple[int, int] | None]


def _scan(body: bytes, prompt_key: bytes) -> _Found:
    model: str | None = None
    stream = False
    span: tuple[int, int] | None = None
    pos = _ws(body, 0)
    if body[pos : pos + 1] != b"{":
        raise _ScanError("not an object")
    pos = _ws(body, pos + 1)
    if body[pos : pos + 1] == b"}":
        return model, stream, span
    while True:
        key_match = _STRING.match(body, pos)
        if key_match is None:
            raise _ScanError("expected a key")
        key = body[key_match.start() + 1 : key_match.end() - 1]
        pos = _ws(body, key_match.end())
        if body[pos : pos + 1] != b":":
            raise _ScanError("expected ':'")
        pos = _ws(body, pos + 1)
        end = skip_value(body, pos)
        if key == b"model":
            model = _read_model(body[pos:end])
        elif key == b"stream":
            stream = _read_stream(body[pos:end])
        elif key == prompt_key:
            span = (pos, end)
        pos = _ws(body, end)
        sep = body[pos : pos + 1]
        if sep == b"}":
            break
        if sep != b",":
            raise _ScanError("expected ',' or '}'")
        pos = _ws(body, pos + 1)
    if _ws(body, pos + 1) != len(body):
        raise _ScanError("trailing data")
    return model, stream, span


def _ws(body: bytes, pos: int) -> int:
    match = _WS.match(body, pos)
    return match.end() if match is not None else pos


def skip_value(body: bytes, pos: int) -> int:
    """Index just past the JSON value starting at ``pos``."""
    first = body[pos : pos + 1]
    if first == b'"':
        match = _STRING.match(body, pos)
        if match is None:
            raise _ScanError("unterminated string")
        return match.end()
    if first in (b"[", b"{"):
        return _skip_container(body, pos)
    match = _SCALAR.match(body, pos)
    if match is None or match.end() == pos:
        raise _ScanError("expected a value")
    return match.end()


def _skip_container(body: bytes, pos: int) -> int:
    if body[pos] == ord("["):
        # Fast path: a flat list of numbers (token ids) has no quote, bracket or brace inside.
        close = body.find(b"]", pos + 1)
        if close != -1 and all(body.find(ch, pos + 1, close) == -1 for ch in (b"[", b"{", b'"')):
            return close + 1
    stack: list[int] = []
    index = pos
    while True:
        match = _STRUCT.search(body, index)
        if match is None:
            raise _ScanError("unterminated container")
        char = body[match.start()]
        if char == ord('"'):
            string = _STRING.match(body, match.start())
            if string is None:
                raise _ScanError("unterminated string")
            index = string.end()
            continue
        index = match.end()
        if char in _CLOSER:
            stack.append(_CLOSER[char])
            if len(stack) > _MAX_DEPTH:
                raise BadBody(f"request body is nested more than {_MAX_DEPTH} levels deep")
        elif not stack or stack.pop() != char:
            raise _ScanError("mismatched bracket")
        if not stack:
            return index


def _read_model(raw: bytes) -> str | None:
    if raw == b"null":
        return None
    if raw[:1] != b'"':
        raise BadBody("'model' must be a string", param="model")
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise BadBody(f"'model' is not a valid JSON string: {exc}", param="model") from None
    assert isinstance(value, str)
    return value


def _read_stream(raw: bytes) -> bool:
    if raw == b"true":
        return True
    if raw in (b"false", b"null"):
        return False
    raise BadBody("'stream' must be a boolean", param="stream")


def _classify(body: bytes, start: int, prompt_key: bytes) -> PromptKind:
    first = body[start : start + 1]
    if prompt_key == b"messages":
        if first != b"[":
            raise BadBody("'messages' must be a list of message objects", param="messages")
        return "messages"
    if first == b'"':
        return "text"
    if first == b"[":
        inner = body[_ws(body, start + 1) : _ws(body, start + 1) + 1]
        if inner == b"]":
            return "empty"
        if inner == b'"':
            return "batch_text"
        if inner == b"[":
            return "batch_tokens"
        if inner == b"-" or inner.isdigit():
            return "tokens"
    raise BadBody(
        "'prompt' must be a string, a list of token ids, or a list of strings or token-id lists",
        param="prompt",
    )
