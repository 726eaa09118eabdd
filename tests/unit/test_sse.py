"""The SSE framer (``proxy.dataplane.sse``): bytes in, events out, every framing the standard
allows, split anywhere."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxy.dataplane.sse import Event, Framer, encode

ENDINGS = (b"\n", b"\r\n", b"\r")
# A line's text: no CR or LF; anything else, ':' and leading spaces included.
TEXT = st.binary(max_size=12).map(lambda b: b.replace(b"\r", b"").replace(b"\n", b""))


@dataclass(frozen=True)
class Spec:
    """One event as the replica means it: its data lines and comments after some of them."""

    data: tuple[bytes, ...]
    comments: tuple[tuple[int, bytes], ...]  # (after which data line, 0: before the first)


SPECS = st.builds(
    Spec,
    st.lists(TEXT, min_size=1, max_size=3).map(tuple),
    st.lists(st.tuples(st.integers(0, 3), TEXT), max_size=3).map(tuple),
)


def frame(
    specs: list[Spec], endings: list[bytes], between: list[bytes]
) -> tuple[bytes, list[bytes]]:
    """``specs`` written with each line's end taken in turn from ``endings`` and comment-only
    blocks ``between`` events; and the comment lines, in order. A CR followed by an LF is one
    line end (CRLF), so an empty line after a CR does not end with a bare LF."""
    lines: list[bytes] = []
    for i, spec in enumerate(specs):
        lines += [b":" + text for at, text in spec.comments if at == 0]
        for n, data in enumerate(spec.data, 1):
            lines.append(b"data: " + data)
            lines += [b":" + text for at, text in spec.comments if at == n]
        lines.append(b"")  # the blank line that ends the event
        if between[i % len(between)]:
            lines += [b":" + between[i % len(between)], b""]
    out, last = b"", b""
    for i, line in enumerate(lines):
        end = endings[i % len(endings)]
        if last == b"\r" and not line and end == b"\n":
            end = b"\r\n"
        out += line + end
        last = end
    return out, [line for line in lines if line.startswith(b":")]


def fed(framer: Framer, data: bytes, cuts: list[int]) -> list[Event]:
    events: list[Event] = []
    start = 0
    for cut in sorted({min(c, len(data)) for c in cuts}):
        events += framer.feed(data[start:cut])
        start = cut
    return events + framer.feed(data[start:])


@given(
    st.lists(SPECS, min_size=1, max_size=5),
    st.lists(st.sampled_from(ENDINGS), min_size=1, max_size=4),
    st.lists(TEXT, min_size=1, max_size=2),
    st.lists(st.integers(0, 400), max_size=30),
)
def test_any_framing_split_anywhere_yields_the_same_events(
    specs: list[Spec], endings: list[bytes], between: list[bytes], cuts: list[int]
) -> None:
    """Fed in random pieces and byte by byte. Fails on LF-only framing (CRLF or CR events never
    end), on a CRLF split between two reads counted as two line ends (an event cut in two), on
    comments read as data or as the end of an event, and on data lines not joined with LF."""
    stream, comments = frame(specs, endings, between)
    for events in (fed(Framer(), stream, cuts), fed(Framer(), stream, list(range(len(stream))))):
        assert [event[0] for event in events if event[0] is not None] == [
            b"\n".join(spec.data) for spec in specs
        ]
        assert b"".join(event[1] for event in events).split(b"\n")[:-1] == comments


@pytest.mark.parametrize(
    ("reads", "events"),
    [
        ([b"data: a\r", b"\ndata: b\r\n\r\n"], [(b"a\nb", b"")]),  # a CRLF split: one end
        ([b"data: a\r", b"\r"], [(b"a", b"")]),  # CR, then CR: a line end and a blank line
        ([b"data: a\r", b"", b"\n", b"\n"], [(b"a", b"")]),  # an empty read keeps the CR
        ([b"data:a\n\n"], [(b"a", b"")]),  # no space after the colon
        ([b"data:  a\n\n"], [(b" a", b"")]),  # one space dropped, not two
        ([b"data\n\n"], [(b"", b"")]),  # a field name alone: an empty value
        ([b"data: a\ndata: b\n\n"], [(b"a\nb", b"")]),
        ([b": ping\n\n"], [(None, b": ping\n")]),  # a comment-only block
        ([b"event: x\nid: 1\ndata: a\n\n"], [(b"a", b"event: x\nid: 1\n")]),
        ([b"data: a\n\n\n\ndata: b\n\n"], [(b"a", b""), (b"b", b"")]),  # extra blank lines
        ([b"data: a\n\n\ndata: b\n\n"], [(b"a", b""), (b"b", b"")]),
        ([b"data: a\n\ndata: b"], [(b"a", b"")]),  # the incomplete event waits
    ],
)
def test_the_standards_corners(reads: list[bytes], events: list[Event]) -> None:
    """Fails when an empty read forgets a pending CR, two spaces after a colon lose both, a
    field name alone is no field, a run of blank lines makes an event, or an incomplete event
    is given out before its blank line."""
    framer = Framer()
    assert [event for read in reads for event in framer.feed(read)] == events


def test_a_single_event_is_taken_as_it_came_only_when_nothing_is_pending() -> None:
    """Fails when ``single`` takes a read while bytes of an earlier one wait, or takes a read
    of two lines, a CR, or an unfinished event."""
    framer = Framer()
    assert framer.single(b"data: {}\n\n")
    for data in (b"data: {}\n", b"data: {}\r\n\r\n", b"data: a\ndata: b\n\n", b": c\n\n", b""):
        assert not framer.single(data)
    framer.feed(b"data: {")
    assert not framer.single(b"data: {}\n\n")
    framer = Framer()
    framer.feed(b"data: a\r")
    assert not framer.single(b"data: {}\n\n")  # a CR waits for its LF


@given(TEXT, st.lists(TEXT, max_size=3))
def test_what_the_proxy_writes_reads_back_the_same(data: bytes, comments: list[bytes]) -> None:
    """Fails when a payload with a newline is written as one data line (the client would read
    a field named by its second line)."""
    lines = b"".join(b":" + c + b"\n" for c in comments)
    assert Framer().feed(encode(data, lines)) == [(data, lines)]
    two = data + b"\n" + data
    assert Framer().feed(encode(two)) == [(two, b"")]
