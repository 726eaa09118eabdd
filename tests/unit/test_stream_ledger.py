"""Which streams can be continued elsewhere (``resumable``) and what their client is sent
(``ledger``): pure, bytes in and bytes out."""

from __future__ import annotations

import itertools
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxy.dataplane.ledger import DONE, StreamLedger
from proxy.dataplane.resumable import Resumable, resumable


def plan(route: str = "completions", **fields: Any) -> tuple[Resumable, bytes]:
    body = {"model": "m", "prompt": [1, 2, 3], "max_tokens": 8, "stream": True, **fields}
    if route == "chat_completions":
        body.pop("prompt")
        body["messages"] = [{"role": "user", "content": "hi"}]
    found = resumable(route, orjson.dumps(body))
    assert found is not None
    return found


def event(chunk: dict[str, Any]) -> bytes:
    return b"data: " + orjson.dumps(chunk) + b"\n\n"


def completion_chunk(text: str, ids: list[int], **extra: Any) -> bytes:
    choice = {"index": 0, "text": text, "finish_reason": None, "token_ids": ids, **extra}
    return event({"id": "cmpl-a", "created": 1, "model": "m", "choices": [choice]})


def events(data: bytes) -> list[Any]:
    out = []
    for part in data.split(b"\n\n"):
        if part.startswith(b"data: ") and part != b"data: [DONE]":
            out.append(orjson.loads(part[6:]))
    return out


@pytest.mark.parametrize(
    ("route", "fields"),
    [
        ("completions", {"n": 2}),
        ("completions", {"stop": ["\n"]}),
        ("completions", {"stop": "x"}),
        ("completions", {"presence_penalty": 0.5}),
        ("completions", {"frequency_penalty": 0.1}),
        ("completions", {"echo": True}),
        ("completions", {"prompt_logprobs": 1}),
        ("completions", {"response_format": {"type": "json_object"}}),
        ("completions", {"prompt": [[1, 2], [3, 4]]}),
        ("completions", {"max_tokens": 0}),
        ("completions", {"max_tokens": "8"}),
        ("completions", {"stream": False}),
        ("chat_completions", {"tools": [{"type": "function"}]}),
        ("chat_completions", {"logprobs": True}),
        ("generate", {}),
    ],
)
def test_requests_that_a_continuation_could_not_reproduce_are_not_resumable(
    route: str, fields: dict[str, Any]
) -> None:
    body = {"model": "m", "prompt": [1, 2, 3], "max_tokens": 8, "stream": True, **fields}
    assert resumable(route, orjson.dumps(body)) is None


def test_a_body_that_is_not_json_is_left_to_the_replica() -> None:
    assert resumable("completions", b"{nope") is None


def test_the_ids_are_asked_for_when_the_client_did_not() -> None:
    found, body = plan(logprobs=2, presence_penalty=0, stop=[])
    assert orjson.loads(body)["return_token_ids"] is True
    assert not found.wants_ids
    again, same = plan(return_token_ids=True)
    assert again.wants_ids
    assert orjson.loads(same)["return_token_ids"] is True


def test_a_completion_continues_with_the_sent_tokens_as_prompt_and_less_to_generate() -> None:
    found, _ = plan(min_tokens=5, temperature=0.7, seed=3)
    body = orjson.loads(found.continuation([1, 2, 3], [40, 41]))
    assert body["prompt"] == [1, 2, 3, 40, 41]
    assert (body["max_tokens"], body["min_tokens"]) == (6, 3)
    assert (body["temperature"], body["seed"], body["stream"]) == (0.7, 3, True)
    assert plan(max_tokens=None)[0].max_tokens is None
    default = resumable("completions", b'{"prompt": [1], "stream": true}')
    assert default is not None
    assert default[0].max_tokens == 16  # vLLM's completions default


def test_a_chat_request_continues_through_the_completions_api() -> None:
    found, _ = plan("chat_completions", max_completion_tokens=10, top_p=0.9, max_tokens=None)
    body = orjson.loads(found.continuation([7, 8], [9]))
    assert body == {
        "top_p": 0.9, "model": "m", "prompt": [7, 8, 9], "max_tokens": 9, "stream": True,
        "return_token_ids": True,
    }  # fmt: skip


def test_ids_are_stripped_unless_asked_for_and_counted_either_way() -> None:
    found, _ = plan()
    ledger = StreamLedger(found)
    out = ledger.feed(completion_chunk(" a", [5], prompt_token_ids=[1, 2, 3]))
    (chunk,) = events(out)
    assert "token_ids" not in chunk["choices"][0]
    assert "prompt_token_ids" not in chunk["choices"][0]
    assert (ledger.prompt_ids, ledger.sent) == ([1, 2, 3], [5])
    kept = StreamLedger(plan(return_token_ids=True)[0])
    (chunk,) = events(kept.feed(completion_chunk(" a", [5], prompt_token_ids=[1, 2, 3])))
    assert chunk["choices"][0]["token_ids"] == [5]


def test_events_split_across_reads_are_joined() -> None:
    ledger = StreamLedger(plan()[0])
    whole = completion_chunk(" a", [5], prompt_token_ids=[1]) + completion_chunk(" b", [6])
    out = ledger.feed(whole[:17]) + ledger.feed(whole[17:60]) + ledger.feed(whole[60:])
    assert [c["choices"][0]["text"] for c in events(out)] == [" a", " b"]
    assert ledger.sent == [5, 6]


def test_tokens_without_text_are_held_until_text_follows_and_dropped_at_a_cut() -> None:
    ledger = StreamLedger(plan()[0])
    ledger.feed(completion_chunk(" a", [5], prompt_token_ids=[1, 2, 3]))
    assert ledger.feed(completion_chunk("", [200])) == b""  # half a character: held
    assert ledger.sent == [5]
    out = ledger.feed(completion_chunk("é", [201]))
    assert [c["choices"][0]["text"] for c in events(out)] == ["", "é"]
    assert ledger.sent == [5, 200, 201]
    ledger.feed(completion_chunk("", [202]))
    body = ledger.continue_from()
    assert body is not None
    assert orjson.loads(body)["prompt"] == [1, 2, 3, 5, 200, 201]  # 202 is generated again
    assert orjson.loads(body)["max_tokens"] == 5


def test_a_continuation_is_rewritten_into_the_clients_stream() -> None:
    ledger = StreamLedger(plan(logprobs=1, stream_options={"include_usage": True})[0])
    first = {"text_offset": [0], "token_logprobs": [-1.0], "tokens": [" a"], "top_logprobs": []}
    ledger.feed(completion_chunk(" a", [5], prompt_token_ids=[1, 2, 3], logprobs=first))
    ledger.continue_from()
    assert ledger.announce("r2").startswith(b": X-Rollout-Replica: r2 (after 1 tokens)")
    later = {"text_offset": [0], "token_logprobs": [-2.0], "tokens": [" b"], "top_logprobs": []}
    continued = {
        "id": "cmpl-other", "created": 9, "model": "m", "object": "text_completion",
        "choices": [{"index": 0, "text": " b", "token_ids": [6], "logprobs": later,
                     "prompt_token_ids": [1, 2, 3, 5], "finish_reason": "length"}],
    }  # fmt: skip
    usage = {"id": "cmpl-other", "created": 9, "model": "m", "choices": [],
             "usage": {"prompt_tokens": 4, "completion_tokens": 1, "total_tokens": 5}}  # fmt: skip
    out = ledger.feed(event(continued) + event(usage) + DONE)
    chunk, tail = events(out)
    assert (chunk["id"], chunk["created"]) == ("cmpl-a", 1)
    assert chunk["choices"][0]["logprobs"]["text_offset"] == [2]  # after " a"
    assert "prompt_token_ids" not in chunk["choices"][0]
    assert "token_ids" not in chunk["choices"][0]
    assert tail["usage"] == {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}
    assert ledger.done
    assert ledger.sent == [5, 6]


def test_a_chat_continuation_arrives_as_chat_chunks() -> None:
    ledger = StreamLedger(plan("chat_completions")[0])
    role = {"id": "chat-a", "created": 1, "model": "m", "prompt_token_ids": [7, 8],
            "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}  # fmt: skip
    token = {"id": "chat-a", "created": 1, "model": "m",
             "choices": [{"index": 0, "delta": {"content": " a"}, "token_ids": [5]}]}  # fmt: skip
    out = events(ledger.feed(event(role) + event(token)))
    assert "prompt_token_ids" not in out[0]
    ledger.continue_from()
    continued = {"id": "x", "created": 2, "model": "m", "object": "text_completion",
                 "choices": [{"index": 0, "text": " b", "token_ids": [6],
                              "finish_reason": "length", "stop_reason": None}]}  # fmt: skip
    (chunk,) = events(ledger.feed(event(continued)))
    assert chunk["object"] == "chat.completion.chunk"
    assert chunk["id"] == "chat-a"
    assert chunk["choices"] == [
        {"index": 0, "delta": {"content": " b"}, "logprobs": None, "finish_reason": "length",
         "stop_reason": None}
    ]  # fmt: skip


def test_a_chat_stream_with_tool_calls_or_reasoning_is_not_continued() -> None:
    ledger = StreamLedger(plan("chat_completions")[0])
    choice = {"index": 0, "delta": {"reasoning_content": "hm"}, "token_ids": [1]}
    chunk = {"id": "c", "created": 1, "model": "m", "choices": [choice]}
    ledger.feed(event(chunk))
    assert ledger.opaque


def test_a_stream_cut_after_its_last_token_is_ended_with_its_usage() -> None:
    ledger = StreamLedger(plan(max_tokens=1, stream_options={"include_usage": True})[0])
    ledger.feed(completion_chunk(" a", [5], prompt_token_ids=[1, 2], finish_reason="length"))
    assert ledger.finished
    usage, done = ledger.closing().split(b"\n\n")[:2]
    assert orjson.loads(usage[6:])["usage"] == {
        "prompt_tokens": 2, "completion_tokens": 1, "total_tokens": 3
    }  # fmt: skip
    assert done == b"data: [DONE]"


# -- one stream, any framing: what the client gets and what a cut continues from ----------------

TEXTS = (" a", "", "é", ' say "hi"', "\\", "}")  # "": tokens without text yet (held)


@st.composite
def replica_stream(draw: st.DrawFn) -> tuple[str, bool, list[dict[str, Any]]]:
    """A stream as vLLM writes it with the token ids asked for: the prompt's ids first, one
    chunk per token (some without text yet), a finish, the usage chunk."""
    kind = draw(st.sampled_from(["completion", "chat"]))
    texts = draw(st.lists(st.sampled_from(TEXTS), min_size=1, max_size=6))
    head = {"id": "s", "created": 1, "model": "m"}
    chunks: list[dict[str, Any]] = []
    if kind == "chat":
        role = {"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}
        chunks.append({**head, "choices": [role], "prompt_token_ids": [1, 2, 3]})
    for i, text in enumerate(texts):
        finish = "length" if i == len(texts) - 1 else None
        if kind == "chat":
            choice = {"index": 0, "delta": {"content": text}, "logprobs": None,
                      "finish_reason": finish, "token_ids": [100 + i]}  # fmt: skip
        else:
            choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish,
                      "stop_reason": None, "prompt_token_ids": [1, 2, 3] if i == 0 else None,
                      "token_ids": [100 + i]}  # fmt: skip
        chunks.append({**head, "choices": [choice]})
    chunks.append({**head, "choices": [], "usage": {"prompt_tokens": 3, "total_tokens": 9}})
    return kind, draw(st.booleans()), chunks


def reframed(chunks: list[dict[str, Any]], style: str) -> list[bytes]:
    """The stream's events as reads: one event per read (``lf``), or reframed: CRLF or CR line
    ends, comment lines inside and between events, data split over two lines."""
    events = [orjson.dumps(chunk) for chunk in chunks] + [b"[DONE]"]
    if style == "lf":
        return [b"data: " + event + b"\n\n" for event in events]
    end = {"crlf": b"\r\n", "cr": b"\r"}.get(style, b"\n")
    out = []
    for event in events:
        lines = [b": before", *[b"data: " + part for part in event.split(b',"', 1)], b": after"]
        if len(lines) == 4:  # the second data line starts where the split was
            lines[2] = b'data: ,"' + lines[2][6:]
        out.append(b"".join(line + end for line in lines) + end + b": ping" + end + end)
    return out


def client_data(out: bytes) -> list[Any]:
    """The client's events' data, parsed (the proxy writes LF line ends)."""
    found = []
    for block in out.split(b"\n\n")[:-1]:
        data = [line[6:] for line in block.split(b"\n") if line.startswith(b"data: ")]
        if data and data != [b"[DONE]"]:
            found.append(orjson.loads(b"\n".join(data)))
    return found


def as_client_wants(chunks: list[dict[str, Any]], kind: str, wants: bool) -> list[Any]:
    out = orjson.loads(orjson.dumps(chunks))
    for chunk in out if not wants else ():
        for choice in chunk["choices"]:
            choice.pop("token_ids", None)
            holder = chunk if kind == "chat" else choice
            if holder.get("prompt_token_ids") is not None:
                del holder["prompt_token_ids"]
    return list(out)


@given(replica_stream(), st.sampled_from(["lf", "crlf", "cr", "comments"]),
       st.lists(st.integers(0, 3000), max_size=12), st.integers(0, 9))  # fmt: skip
def test_any_framing_and_splitting_gives_the_client_the_same_stream_and_account(
    stream: tuple[str, bool, list[dict[str, Any]]], style: str, cuts: list[int], cut_after: int
) -> None:
    """Read as vLLM writes it (one event per read: the fast path), reframed (CRLF, CR, comment
    lines inside events, data over two lines), split anywhere or byte by byte: the client gets
    the replica's chunks (ids stripped unless it asked for them) and ``[DONE]``, and a cut after
    any event continues from the same tokens: those sent with their text, the held ones not.
    Fails on LF-only framing, on a fast path that accounts or strips otherwise than the parse,
    and on a held chunk sent (or counted) before its text."""
    kind, wants, chunks = stream
    route = "completions" if kind == "completion" else "chat_completions"
    reads = reframed(chunks, style)
    whole = b"".join(reads)
    for pieces in (reads, _split(whole, cuts), _split(whole, list(range(len(whole))))):
        ledger = StreamLedger(plan(route, **({"return_token_ids": True} if wants else {}))[0])
        out = b"".join(ledger.feed(piece) for piece in pieces)
        assert client_data(out) == as_client_wants(chunks, kind, wants)
        assert DONE in out and ledger.done and ledger.finished
        assert ledger.sent == [100 + i for i in range(len(chunks) - 1 - (kind == "chat"))]
        assert ledger.prompt_ids == [1, 2, 3]
        assert not ledger.opaque
    at = min(cut_after, len(reads) - 1)
    ledger = StreamLedger(plan(route, **({"return_token_ids": True} if wants else {}))[0])
    for read in reads[:at]:
        ledger.feed(read)
    sent: list[int] = []
    held: list[int] = []
    for chunk in chunks[:at]:  # a chunk whose tokens have no text yet waits for the next one
        ids = chunk["choices"][0].get("token_ids") or [] if chunk["choices"] else []
        held += ids
        if not _textless(chunk, kind):
            sent, held = sent + held, []
    assert ledger.sent == sent


def _textless(chunk: dict[str, Any], kind: str) -> bool:
    if not chunk["choices"]:
        return False
    choice = chunk["choices"][0]
    text = choice["delta"].get("content") if kind == "chat" else choice["text"]
    return not text and choice["finish_reason"] is None and bool(choice.get("token_ids"))


def _split(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({0, len(data), *(min(c, len(data)) for c in cuts)})
    return [data[a:b] for a, b in itertools.pairwise(points)]


def test_ids_that_do_not_read_as_token_ids_are_not_continued() -> None:
    """Fails when unparsed ids that are not integers go into a continuation's prompt."""
    ledger = StreamLedger(plan()[0])
    ledger.feed(completion_chunk(" a", [5], prompt_token_ids=[1, 2, 3]))
    assert not ledger.opaque
    ledger.feed(
        b'data: {"choices":[{"index":0,"text":"b","finish_reason":null,"token_ids":[1.5]}]}\n\n'
    )
    assert ledger.opaque
