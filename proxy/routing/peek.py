"""Read what routing needs from a generation body without parsing the whole of it.

The body is forwarded as the bytes it came in; the proxy only needs ``model``, ``stream`` and
where the prompt (``prompt`` or ``messages``) lies. The prompt is what grows (thousands of token
ids), so it is never turned into Python objects:
1. a compiled pattern finds the ``"prompt":`` key and the value is skipped with ``bytes.find``
   (a flat token-id list is three C-level scans);
2. the body with that value replaced by ``0`` is a small document: ``orjson`` parses it, which
   validates the rest of the JSON and yields ``model`` and ``stream``;
3. the parse must show the placeholder under the top-level key; if it does not (the key was found
   inside a nested object, duplicate keys, odd shapes), or anything above fails, the body is
   parsed whole and re-serialised, and the spans refer to that canonical copy (``Peek.buffer``).
So the cost does not grow with the prompt, and correctness never depends on the fast path.

Contract: a body that is not a JSON object, or whose ``model``/prompt has the wrong type, raises
``BadBody`` with a message for the client (answered 400); anything malformed inside the prompt
value is left for the replica to report, as vLLM would.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Literal

import orjson

PromptKind = Literal["tokens", "text", "batch_tokens", "batch_text", "messages", "empty"]

_WS = re.compile(rb"[ \t\r\n]*")
_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"', re.DOTALL)
_SCALAR = re.compile(rb"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?|true|false|null")
_STRUCT = re.compile(rb'["\[\]{}]')
_CLOSER = {ord("["): ord("]"), ord("{"): ord("}")}
_MAX_DEPTH = 512
_KEYS = {
    key: re.compile(rb'"' + key + rb'"[ \t\r\n]*:[ \t\r\n]*') for key in (b"prompt", b"messages")
}


class BadBody(ValueError):
    """The body cannot be routed; the message says what was wrong (answered 400)."""

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param


class _ScanError(Exception):
    """The fast path could not read the body (malformed, or a shape it does not handle)."""


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
    """``model``, ``stream`` and the span of ``prompt_key``'s value (``prompt``/``messages``)."""
    found = _fast(body, prompt_key)
    if found is not None:
        return found
    canonical = _canonical(body)
    found = _fast(canonical, prompt_key)
    if found is None:
        name = prompt_key.decode()
        raise BadBody(f"'{name}' is required", param=name)
    return found


def _fast(body: bytes, prompt_key: bytes) -> Peek | None:
    match = _KEYS[prompt_key].search(body)
    if match is None:
        return None
    start = match.end()
    try:
        end = skip_value(body, start)
        rest = orjson.loads(body[:start] + b"0" + body[end:])
    except (_ScanError, orjson.JSONDecodeError):
        return None
    if not isinstance(rest, dict):
        return None
    placeholder = rest.get(prompt_key.decode())
    if type(placeholder) is not int or placeholder != 0:
        return None
    model = _model(rest.get("model"))
    stream = _stream(rest.get("stream"))
    return Peek(model, stream, _classify(body, start, prompt_key), body, start, end)


def _canonical(body: bytes) -> bytes:
    try:
        value = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise BadBody(f"request body is not valid JSON: {exc}") from None
    if not isinstance(value, dict):
        raise BadBody("request body must be a JSON object")
    return orjson.dumps(value)


def _model(value: Any) -> str | None:
    if value is None or isinstance(value, str):
        return value
    raise BadBody("'model' must be a string", param="model")


def _stream(value: Any) -> bool:
    if value is None or value is False:
        return False
    if value is True:
        return True
    raise BadBody("'stream' must be a boolean", param="stream")


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
