"""The upstream answer parser without sockets: bytes in, events out."""

from __future__ import annotations

import pytest

from proxy.upstream.errors import AnswerTooLong, BadAnswer
from proxy.upstream.parser import AnswerParser, Head


class Recorder:
    def __init__(self) -> None:
        self.heads: list[Head] = []
        self.body = bytearray()
        self.completed = 0

    def on_head(self, head: Head) -> None:
        self.heads.append(head)

    def on_body(self, data: bytes) -> None:
        self.body += data

    def on_complete(self) -> None:
        self.completed += 1


def parse(*pieces: bytes) -> tuple[AnswerParser, Recorder]:
    sink = Recorder()
    parser = AnswerParser(sink)
    parser.start()
    for piece in pieces:
        parser.feed(piece)
    return parser, sink


def bytewise(data: bytes) -> list[bytes]:
    return [data[i : i + 1] for i in range(len(data))]


def test_content_length_answer_fed_one_byte_at_a_time() -> None:
    answer = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 5\r\n\r\nhello"
    parser, sink = parse(*bytewise(answer))
    assert parser.done and sink.completed == 1
    head = sink.heads[0]
    assert (head.status, head.content_length, head.keep_alive) == (200, 5, True)
    assert head.headers["content-type"] == "application/json"
    assert bytes(sink.body) == b"hello"


def test_chunked_answer_split_anywhere_is_decoded() -> None:
    head = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
    answer = head + b"5\r\nhello\r\n6;x=y\r\n world\r\n0\r\n\r\n"
    for cut in range(1, len(answer)):
        parser, sink = parse(answer[:cut], answer[cut:])
        assert parser.done and bytes(sink.body) == b"hello world", cut
        assert sink.heads[0].content_length is None


def test_a_body_until_close_completes_at_eof_and_is_not_kept_alive() -> None:
    parser, sink = parse(b"HTTP/1.1 200 OK\r\n\r\npart one ", b"part two")
    assert not parser.done and not sink.heads[0].keep_alive
    assert parser.feed_eof() and sink.completed == 1
    assert bytes(sink.body) == b"part one part two"


def test_eof_before_the_end_is_not_a_complete_answer() -> None:
    parser, _ = parse(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort")
    assert not parser.feed_eof()


def test_no_body_answers_complete_with_their_head() -> None:
    parser, sink = parse(b"HTTP/1.1 204 No Content\r\n\r\n")
    assert parser.done and sink.completed == 1 and sink.body == b""


@pytest.mark.parametrize(
    "answer",
    [
        b"SPDY/3 200 OK\r\n\r\n",
        b"HTTP/1.1 2x0 OK\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nno colon here\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nabc",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
    ],
)
def test_malformed_answers_raise_bad_answer(answer: bytes) -> None:
    with pytest.raises(BadAnswer):
        parse(answer)


def test_bytes_after_a_complete_answer_are_refused() -> None:
    with pytest.raises(BadAnswer, match="after a complete answer"):
        parse(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\nextra")


def test_a_content_length_above_the_limit_is_too_long_before_its_body_is_read() -> None:
    sink = Recorder()
    parser = AnswerParser(sink, max_body=10)
    parser.start()
    with pytest.raises(AnswerTooLong, match="Content-Length 11 is above the limit of 10"):
        parser.feed(b"HTTP/1.1 200 OK\r\nContent-Length: 11\r\n\r\n")
    assert not sink.heads
    parser.start(head=True)  # an answer to HEAD has no body, whatever its length says
    parser.feed(b"HTTP/1.1 200 OK\r\nContent-Length: 11\r\n\r\n")
    assert parser.done and sink.heads[0].content_length == 11
