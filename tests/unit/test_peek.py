"""The body scanner agrees with a full JSON parse, and refuses what routing cannot read."""

from __future__ import annotations

import contextlib
import json
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxy.routing.peek import BadBody, peek_generation

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=6), children, max_size=4)
    ),
    max_leaves=12,
)
prompts = (
    st.lists(st.integers(min_value=0, max_value=200_000), min_size=1, max_size=50)
    | st.text(max_size=40)
    | st.lists(st.text(max_size=10), min_size=1, max_size=4)
    | st.lists(st.lists(st.integers(0, 1000), min_size=1, max_size=5), min_size=1, max_size=3)
)


def trl_body(prompt: Any, **extra: Any) -> dict[str, Any]:
    return {"model": "trl-policy-v3", "prompt": prompt, "max_tokens": 16, **extra}


@given(
    prompt=prompts,
    extra=st.dictionaries(
        st.text(max_size=8).filter(lambda k: k not in ("model", "prompt", "stream")),
        json_values,
        max_size=4,
    ),
    spaced=st.booleans(),
    stream=st.booleans(),
)
def test_scanner_matches_full_parse(
    prompt: Any, extra: dict[str, Any], spaced: bool, stream: bool
) -> None:
    doc = {**trl_body(prompt, stream=stream), **extra}
    body = json.dumps(doc).encode() if spaced else orjson.dumps(doc)
    peek = peek_generation(body, b"prompt")
    assert peek.buffer is body  # the fast path handled it
    assert peek.model == "trl-policy-v3"
    assert peek.stream is stream
    assert json.loads(peek.buffer[peek.start : peek.end]) == prompt


@pytest.mark.parametrize(
    ("prompt", "kind"),
    [
        ([1, 2, 3], "tokens"),
        ("hello", "text"),
        (["a", "b"], "batch_text"),
        ([[1, 2], [3]], "batch_tokens"),
        ([], "empty"),
    ],
)
def test_prompt_kinds(prompt: Any, kind: str) -> None:
    assert peek_generation(orjson.dumps(trl_body(prompt)), b"prompt").kind == kind


def test_messages_for_chat() -> None:
    body = orjson.dumps({"model": "m", "messages": [{"role": "user", "content": "hi ]"}]})
    peek = peek_generation(body, b"messages")
    assert peek.kind == "messages"
    assert orjson.loads(body[peek.start : peek.end]) == [{"role": "user", "content": "hi ]"}]


def test_model_after_prompt_and_escaped_model_name() -> None:
    body = b'{"prompt": [5, 6], "model": "a\\"b\\u00e9", "n": 8}'
    peek = peek_generation(body, b"prompt")
    assert peek.model == 'a"bé'


def test_missing_model_is_allowed_like_vllm() -> None:
    assert peek_generation(b'{"prompt": [1]}', b"prompt").model is None


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        (b"not json", "not valid JSON"),
        (b'{"model": "m", "prompt": [1, 2', "not valid JSON"),
        (b"[1, 2]", "must be a JSON object"),
        (b'{"model": 3, "prompt": [1]}', "'model' must be a string"),
        (b'{"model": "m", "prompt": 7}', "'prompt' must be"),
        (b'{"model": "m", "prompt": {"a": 1}}', "'prompt' must be"),
        (b'{"model": "m"}', "'prompt' is required"),
        (b'{"model": "m", "prompt": [1], "stream": "yes"}', "'stream' must be a boolean"),
        (b'{"model": "m", "prompt": [1]} trailing', "not valid JSON"),
        (b"\xff\xfe{}", "not valid JSON"),
        (b"", "not valid JSON"),
    ],
)
def test_bad_bodies_are_refused_with_a_reason(body: bytes, fragment: str) -> None:
    with pytest.raises(BadBody, match=fragment):
        peek_generation(body, b"prompt")


def test_deep_nesting_is_refused_without_recursion() -> None:
    deep = b"[" * 100_000 + b"]" * 100_000
    body = b'{"model": "m", "prompt": [1], "extra": ' + deep + b"}"
    with pytest.raises(BadBody, match=r"more than \d+ JSON arrays and objects"):
        peek_generation(body, b"prompt")


def test_chat_messages_must_be_a_list() -> None:
    with pytest.raises(BadBody, match="'messages' must be a list"):
        peek_generation(b'{"model": "m", "messages": "hi"}', b"messages")


@given(st.binary(max_size=64))
def test_arbitrary_bytes_never_crash(data: bytes) -> None:
    with contextlib.suppress(BadBody):
        peek_generation(data, b"prompt")
