"""Bad input at a live proxy: every malformed request gets a 4xx with a reason, and the next good
request is served. Fuzzed with hypothesis; raw sockets for what an HTTP client refuses to send."""

from __future__ import annotations

import http.client
import json
import socket
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.calls import completion
from tests.support.fleet import Stack
from tests.support.threaded import threaded_stack

GOOD = json.dumps(completion()).encode()


@pytest.fixture(scope="module")
def live() -> Iterator[Stack]:
    with threaded_stack(2, max_body_bytes=64 * 1024) as stack:
        yield stack


def send(
    stack: Stack, body: bytes, path: str = "/v1/completions", headers: dict[str, str] | None = None
) -> tuple[int, bytes]:
    host, port = stack.proxy_url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    try:
        conn.request(
            "POST", path, body=body, headers={"Content-Type": "application/json", **(headers or {})}
        )
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def assert_still_serving(stack: Stack) -> None:
    status, body = send(stack, GOOD)
    assert status == 200, body


json_values: Any = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**63 - 1)
    | st.text(max_size=20)
    | st.floats(allow_nan=False, allow_infinity=False),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=10,
)
fields = st.fixed_dictionaries(
    {},
    optional={
        "model": json_values,
        "prompt": json_values,
        "n": json_values,
        "max_tokens": json_values,
        "stream": json_values,
        "temperature": json_values,
        "logprobs": json_values,
    },
)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(doc=fields)
def test_wrong_types_in_every_field(live: Stack, doc: dict[str, Any]) -> None:
    status, body = send(live, json.dumps(doc).encode())
    assert status == 200 or 400 <= status < 500, (status, body)
    if status >= 400:
        assert json.loads(body)["error"]["message"]


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    raw=st.binary(max_size=300) | st.binary(max_size=50).map(lambda b: GOOD[: len(GOOD) // 2] + b)
)
def test_garbage_and_truncated_bodies(live: Stack, raw: bytes) -> None:
    status, body = send(live, raw)
    assert 400 <= status < 500, (status, body)
    assert json.loads(body)["error"]["message"]


def test_huge_prompt_and_deep_nesting(live: Stack) -> None:
    status, body = send(live, json.dumps(completion(prompt=list(range(100_000)))).encode())
    assert status == 413
    deep = b'{"model": "sim-model", "prompt": [1], "x": ' + b"[" * 5000 + b"]" * 5000 + b"}"
    status, body = send(live, deep)
    assert status == 400
    assert b"not valid JSON" in body
    assert_still_serving(live)


def raw_request(stack: Stack, data: bytes) -> bytes:
    host, port = stack.proxy_url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=5) as sock:
        sock.sendall(data)
        sock.shutdown(socket.SHUT_WR)
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


@pytest.mark.parametrize(
    "data",
    [
        b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 99999\r\n\r\n{}",
        b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: -5\r\n\r\n{}",
        b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n{}",
        b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nX-Routing-Key: a\rInjected: 1\r\n\r\n",
        b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nX-Routing-Key: a\nb\r\n\r\n",
        b"GET /../../etc/passwd HTTP/1.1\r\nHost: x\r\n\r\n",
        b"BREW /v1/completions HTTP/1.1\r\nHost: x\r\n\r\n",
        b"\x00\x01\x02 garbage\r\n\r\n",
        b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nZZZ\r\n",
    ],
)
def test_malformed_http(live: Stack, data: bytes) -> None:
    answer = raw_request(live, data)
    # Either a 4xx, or the connection closed without an answer for a body that never came.
    if answer:
        status = int(answer.split(b" ", 2)[1])
        assert 400 <= status < 500, answer[:200]
    assert_still_serving(live)


def test_non_utf8_and_wrong_content_type(live: Stack) -> None:
    status, body = send(live, b'{"model": "sim-model", "prompt": "\xff\xfe"}')
    assert status == 400  # from the proxy or, inside the prompt, from the replica
    assert b"UTF-8" in body
    status, _ = send(live, GOOD, headers={"Content-Type": "text/plain"})
    assert status == 400  # the replica's own refusal, passed through
    assert_still_serving(live)
