"""The fast replica's streamed completion (``benchmarks.harness.fast_replica``) has vLLM's shape,
as tests/contract holds a replica to it: chunked server-sent events, one token each, the
prompt's ids in the first only, ``finish_reason`` in the last, then ``data: [DONE]``."""

from __future__ import annotations

import json

import orjson

from benchmarks.harness.blast import bodies
from benchmarks.harness.fast_replica import StreamAnswer, prompt_ids, streamed


def dechunk(body: bytes) -> bytes:
    """A chunked body's data, checking every chunk's size and the closing empty chunk."""
    out = b""
    while True:
        size_end = body.index(b"\r\n")
        size = int(body[:size_end], 16)
        if size == 0:
            assert body[size_end:] == b"\r\n\r\n"
            return out
        chunk = body[size_end + 2 : size_end + 2 + size]
        assert body[size_end + 2 + size : size_end + 4 + size] == b"\r\n"
        out += chunk
        body = body[size_end + 4 + size :]


def test_a_stream_of_n_tokens_is_n_events_then_done_one_write_each() -> None:
    body = bodies(600, count=1, stream=True, max_tokens=5)[0]
    writes = StreamAnswer(5).writes(body)
    assert len(writes) == 5 + 1  # an event per write, [DONE] with the body's end
    head, _, first = writes[0].partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 OK")
    assert b"Content-Type: text/event-stream" in head and b"Transfer-Encoding: chunked" in head
    events = dechunk(first + b"".join(writes[1:])).split(b"\n\n")
    assert events[-2:] == [b"data: [DONE]", b""]
    chunks = [json.loads(event.removeprefix(b"data: ")) for event in events[:-2]]
    assert len(chunks) == 5
    assert all(c["object"] == "text_completion" for c in chunks)
    choices = [c["choices"][0] for c in chunks]
    assert [c["token_ids"] for c in choices] == [[100], [101], [102], [103], [104]]
    assert all(c["text"] for c in choices)
    assert [c["finish_reason"] for c in choices] == [None] * 4 + ["length"]
    assert choices[0]["prompt_token_ids"] == orjson.loads(body)["prompt"]
    assert all(c["prompt_token_ids"] is None for c in choices[1:])


def test_the_request_is_read_from_its_bytes_with_or_without_spaces() -> None:
    assert streamed(b'{"prompt":[1],"stream":true}')
    assert streamed(b'{"prompt": [1], "stream" : true}')
    assert not streamed(b'{"prompt":[1],"stream":false,"stream_options":{}}')
    assert not streamed(b'{"prompt":[1]}')
    assert prompt_ids(b'{"model":"m","prompt": [1, 2, 3],"n":1}') == b"[1, 2, 3]"
    assert prompt_ids(b'{"model":"m","prompt":"text"}') == b"null"
    assert prompt_ids(b'{"model":"m"}') == b"null"
