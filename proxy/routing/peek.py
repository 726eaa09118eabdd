"""Read what routing needs from a generation body without parsing the whole of it.

The body is forwarded as the bytes it came in; the proxy only needs ``model``, ``stream`` and
where the prompt (``prompt`` or ``messages``) lies. The prompt is what grows (thousands of token
ids), so it is never turned into Python objects:
1. a compiled pattern finds the ``"prompt":`` key and the value is skipped: a flat token-id list
   or a string with C-level ``bytes.find``; nested values one structural character at a time;
2. the body with that value replaced by ``0`` is a small document: ``orjson`` parses it, which
   validates the rest of the JSON and yields ``model`` and ``stream``;
3. the parse must show the placeholder under the top-level key; if it does not (the key was found
   inside a nested object, duplicate keys, odd shapes), or anything above fails, the body is
   parsed whole and re-serialised, and the spans refer to that canonical copy (``Peek.buffer``).

Bounded work, whatever the body's shape (a request must not hold the event loop): skipping a
value visits at most ``max_elements`` structural characters (brackets, braces, strings) in
Python; a body is parsed whole, or the rest beside the prompt parsed, only when it holds at most
``max_elements`` arrays and objects (counted with C-level ``bytes.count``). A body beyond these
bounds is refused with ``BadBody`` (400) naming the limit. Everything else costs C-level scans.

Contract: a body that is not a JSON object, or whose ``model``/prompt has the wrong type, raises
``BadBody`` with a message for the client (answered 400); anything malformed inside the prompt
value is left for the replica to report, as vLLM would.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Literal

import orjson

from proxy.errors import DomainError

PromptKind = Literal["tokens", "text", "batch_tokens", "batch_text", "messages", "empty"]

DEFAULT_MAX_ELEMENTS = 8192
_WS = re.compile(rb"[ \t\r\n]*")
_SCALAR = re.compile(rb"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?|true|false|null")
_STRUCT = re.compile(rb'["\[\]{}]')
_CLOSER = {ord("["): ord("]"), ord("{"): ord("}")}
_BACKSLASH = 92
_MAX_DEPTH = 512
_KEYS = {
    key: re.compile(rb'"' + key + rb'"[ \t\r\n]*:[ \t\r\n]*')
    for key in (b"prompt", b"messages", b"token_ids")
}


class BadBody(DomainError, ValueError):
    """The body cannot be routed; the message says what was wrong (answered 400)."""

    reason = "bad_request"

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param


class _ScanError(Exception):
    """The fast path could not read the body (malformed, or a shape it does not handle)."""


class _Budget:
    """Structural characters a scan may still visit in Python."""

    __slots__ = ("left", "limit")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.left = limit

    def spend(self, n: int = 1) -> None:
        self.left -= n
        if self.left < 0:
            raise BadBody(
                f"the prompt holds more than {self.limit} JSON arrays, objects and strings; "
                "split the request (the proxy bounds its work per request: "
                "--max-prompt-elements)"
            )


@dataclass(slots=True)  # made per request: not frozen (see proxy/__init__.py)
class Peek:
    """What routing reads from one generation request."""

    model: str | None
    stream: bool
    kind: PromptKind
    buffer: bytes  # the bytes ``start``/``end`` index (the original body on the fast path)
    start: int
    end: int
    max_tokens: int | None = None  # max_tokens / max_completion_tokens (sampling_params' for
    n: int = 1  # token-in requests), n: the budget the cost model reads


def peek_generation(
    body: bytes, prompt_key: bytes, max_elements: int = DEFAULT_MAX_ELEMENTS
) -> Peek:
    """``model``, ``stream``, the decode budget and the span of ``prompt_key``'s value
    (``prompt``, ``messages``, or ``token_ids`` for token-in generation)."""
    found = _fast(body, prompt_key, max_elements)
    if found is not None:
        return found
    canonical = _canonical(body, max_elements)
    found = _fast(canonical, prompt_key, max_elements)
    if found is None:
        name = prompt_key.decode()
        raise BadBody(f"'{name}' is required", param=name)
    return found


def _containers(data: bytes) -> int:
    return data.count(b"[") + data.count(b"{")


def _too_complex(max_elements: int) -> BadBody:
    return BadBody(
        f"the request body holds more than {max_elements} JSON arrays and objects; "
        "the proxy bounds its work per request (--max-prompt-elements)"
    )


def _fast(body: bytes, prompt_key: bytes, max_elements: int) -> Peek | None:
    match = _KEYS[prompt_key].search(body)
    if match is None:
        return None
    start = match.end()
    try:
        end = skip_value(body, start, _Budget(max_elements))
        rest = body[:start] + b"0" + body[end:]
        if _containers(rest) > max_elements:
            raise _too_complex(max_elements)
        parsed = orjson.loads(rest)
    except (_ScanError, orjson.JSONDecodeError):
        return None
    if not isinstance(parsed, dict):
        return None
    placeholder = parsed.get(prompt_key.decode())
    if type(placeholder) is not int or placeholder != 0:
        return None
    model = _model(parsed.get("model"))
    stream = _stream(parsed.get("stream"))
    kind = _classify(body, start, prompt_key)
    limits = parsed.get("sampling_params") if prompt_key == b"token_ids" else parsed
    max_tokens, n = _budget(limits if isinstance(limits, dict) else {})
    return Peek(model, stream, kind, body, start, end, max_tokens, n)


def _budget(fields: dict[str, Any]) -> tuple[int | None, int]:
    """``max_tokens`` (or ``max_completion_tokens``) and ``n`` when they are positive integers;
    anything else is left for the replica to refuse."""
    limit = fields.get("max_completion_tokens") or fields.get("max_tokens")
    n = fields.get("n")
    good_limit = limit if type(limit) is int and limit > 0 else None
    return good_limit, n if type(n) is int and n > 0 else 1


def _canonical(body: bytes, max_elements: int) -> bytes:
    if _containers(body) > max_elements:
        raise _too_complex(max_elements)
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


def skip_value(body: bytes, pos: int, budget: _Budget | None = None) -> int:
    """Index just past the JSON value starting at ``pos``."""
    budget = budget if budget is not None else _Budget(DEFAULT_MAX_ELEMENTS)
    first = body[pos : pos + 1]
    if first == b'"':
        return _skip_string(body, pos, budget)
    if first in (b"[", b"{"):
        return _skip_container(body, pos, budget)
    match = _SCALAR.match(body, pos)
    if match is None or match.end() == pos:
        raise _ScanError("expected a value")
    return match.end()


def _skip_string(body: bytes, pos: int, budget: _Budget) -> int:
    """Index just past the string starting at ``pos``: a C-level find per quote; each escaped
    quote, and each 64 backslashes before one, costs one unit of the budget."""
    index = pos + 1
    while True:
        quote = body.find(b'"', index)
        if quote < 0:
            raise _ScanError("unterminated string")
        slashes, back = 0, quote - 1
        while back > pos and body[back] == _BACKSLASH:
            slashes += 1
            back -= 1
            if slashes % 64 == 0:
                budget.spend()
        if slashes % 2 == 0:
            return quote + 1
        budget.spend()
        index = quote + 1


def _flat_list_end(body: bytes, pos: int) -> int:
    """Index past the list at ``pos`` when it is flat (numbers only: no quote, bracket or brace
    inside), found with C-level ``bytes.find``; -1 otherwise."""
    start, close = pos + 1, body.find(b"]", pos + 1)
    if (
        close != -1
        and body.find(b"[", start, close) == -1
        and body.find(b'"', start, close) == -1
        and body.find(b"{", start, close) == -1
    ):
        return close + 1
    return -1


def _skip_container(body: bytes, pos: int, budget: _Budget) -> int:
    if body[pos] == ord("["):
        # Fast path: a flat list of numbers (token ids).
        end = _flat_list_end(body, pos)
        if end != -1:
            return end
    stack: list[int] = []
    index = pos
    while True:
        budget.spend()
        match = _STRUCT.search(body, index)
        if match is None:
            raise _ScanError("unterminated container")
        char = body[match.start()]
        if char == ord('"'):
            index = _skip_string(body, match.start(), budget)
            continue
        if char == ord("[") and stack:  # an inner token-id list: skipped at C speed
            end = _flat_list_end(body, match.start())
            if end != -1:
                index = end
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


def elements(buf: bytes, start: int, end: int, limit: int) -> list[tuple[int, int]]:
    """Spans of the first ``limit`` elements of the JSON list at ``buf[start:end]``."""
    spans: list[tuple[int, int]] = []
    budget = _Budget(DEFAULT_MAX_ELEMENTS)
    pos = start + 1
    while len(spans) < limit:
        while buf[pos : pos + 1] in (b" ", b"\n", b"\t", b"\r", b","):
            pos += 1
        if pos >= end - 1 or buf[pos : pos + 1] == b"]":
            return spans
        value_end = skip_value(buf, pos, budget)
        spans.append((pos, value_end))
        pos = value_end
    return spans


def _classify(body: bytes, start: int, prompt_key: bytes) -> PromptKind:
    first = body[start : start + 1]
    if prompt_key == b"messages":
        if first != b"[":
            raise BadBody("'messages' must be a list of message objects", param="messages")
        return "messages"
    if prompt_key == b"token_ids":
        inner = _first_inside(body, start)
        if first != b"[" or not (inner == b"-" or inner.isdigit()):
            raise BadBody("'token_ids' must be a non-empty list of token ids", param="token_ids")
        return "tokens"
    if first == b'"':
        return "text"
    if first == b"[":
        inner = _first_inside(body, start)
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


def _first_inside(body: bytes, start: int) -> bytes:
    """The first byte after the opening bracket at ``start`` and any whitespace."""
    at = _ws(body, start + 1)
    return body[at : at + 1]


def prompt_tokens(peek: Peek) -> int:
    """The prompt's length in tokens: exact for token ids (commas counted in C), about a quarter
    of the bytes for text and chat messages."""
    if peek.kind == "tokens":
        return peek.buffer.count(b",", peek.start, peek.end) + 1
    return max((peek.end - peek.start) // 4, 1)
