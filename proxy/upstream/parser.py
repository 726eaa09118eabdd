"""Parsing a replica's HTTP/1.1 answer: bytes in, events out, no I/O.

``AnswerParser.feed(data)`` reads whatever bytes have arrived and reports, on its ``AnswerSink``,
the answer's head (status, headers, framing), each body part (transfer coding removed) and the
answer's end. ``feed_eof()`` says whether the connection closing completes the answer (a body
delimited by the close) or cuts it. A malformed answer raises ``BadAnswer``.

Rules kept here: one answer per ``start()``; a head must end within ``MAX_HEAD`` bytes; body by
Content-Length, by chunked coding or until the connection closes (never kept alive then); 204 and
304 have no body; no byte may follow a complete answer. Tested without sockets
(``tests/unit/test_answer_parser.py``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Protocol

from proxy.upstream.errors import BadAnswer

MAX_HEAD = 64 * 1024  # an answer's status line and headers together
_HEX: Final = b"0123456789abcdefABCDEF"

# Where the parser is in the answer.
_HEAD, _LENGTH, _CHUNK_SIZE, _CHUNK_DATA, _CHUNK_END, _TRAILER, _UNTIL_CLOSE, _DONE = range(8)


@dataclass(frozen=True, slots=True)
class Head:
    status: int
    headers: dict[str, str]  # lower-cased names
    content_length: int | None
    keep_alive: bool


class AnswerSink(Protocol):
    def on_head(self, head: Head) -> None: ...

    def on_body(self, data: bytes) -> None: ...

    def on_complete(self) -> None: ...


class AnswerParser:
    """Parses one answer at a time; ``start`` before each."""

    __slots__ = ("_buffer", "_keep_alive", "_remaining", "_sink", "_state")

    def __init__(self, sink: AnswerSink) -> None:
        self._sink = sink
        self._state = _DONE
        self._buffer = bytearray()
        self._remaining = 0  # body bytes (or chunk bytes) still to come
        self._keep_alive = True

    @property
    def done(self) -> bool:
        return self._state == _DONE

    @property
    def started_body(self) -> bool:
        return self._state != _HEAD

    def start(self) -> None:
        self._state = _HEAD
        self._buffer.clear()
        self._remaining = 0

    def stop(self) -> None:
        """Abandon the answer being read (its connection is being dropped)."""
        self._state = _DONE
        self._buffer.clear()

    def feed_eof(self) -> bool:
        """The connection closed: True when that completes the answer."""
        if self._state == _UNTIL_CLOSE:
            self._state = _DONE
            self._sink.on_complete()
            return True
        return self._state == _DONE

    def feed(self, data: bytes) -> None:
        if self._state == _HEAD:
            self._buffer += data
            end = self._buffer.find(b"\r\n\r\n")
            if end > MAX_HEAD or (end < 0 and len(self._buffer) > MAX_HEAD):
                raise BadAnswer(f"answer head longer than {MAX_HEAD} bytes")
            if end < 0:
                return
            head = bytes(self._buffer[:end])
            data = bytes(self._buffer[end + 4 :])
            self._buffer.clear()
            self._parse_head(head)
            if not data:
                return
        state = self._state
        if state == _LENGTH:
            self._take_length(data)
        elif state == _UNTIL_CLOSE:
            self._sink.on_body(data)
        elif state == _DONE:
            raise BadAnswer("bytes after a complete answer")
        else:
            self._buffer += data
            self._decode_chunks()

    def _finish(self) -> None:
        self._state = _DONE
        self._sink.on_complete()

    def _take_length(self, data: bytes) -> None:
        if len(data) > self._remaining:
            raise BadAnswer("more body bytes than Content-Length announced")
        self._sink.on_body(data)
        self._remaining -= len(data)
        if self._remaining == 0:
            self._finish()

    def _parse_head(self, head: bytes) -> None:
        lines = head.split(b"\r\n")
        status_line = lines[0]
        version, _, rest = status_line.partition(b" ")
        code = rest[:3]
        if not version.startswith(b"HTTP/1.") or len(code) != 3 or not code.isdigit():
            raise BadAnswer(f"not an HTTP/1.x status line: {status_line[:80]!r}")
        status = int(code)
        headers: dict[str, str] = {}
        for line in lines[1:]:
            name, colon, value = line.partition(b":")
            if not colon or not name or name != name.strip():
                raise BadAnswer(f"malformed header line: {line[:80]!r}")
            headers[name.decode("latin-1").lower()] = value.strip().decode("latin-1")
        connection = headers.get("connection", "").lower()
        http10 = version == b"HTTP/1.0"
        keep_alive = connection == "keep-alive" if http10 else connection != "close"
        if 100 <= status < 200:
            raise BadAnswer(f"unexpected interim answer HTTP {status}")
        transfer = headers.get("transfer-encoding")
        length = headers.get("content-length")
        content_length = None
        if status in (204, 304):
            state = _DONE
        elif transfer is not None:
            if transfer.lower() != "chunked":
                raise BadAnswer(f"unsupported Transfer-Encoding {transfer!r}")
            state = _CHUNK_SIZE
        elif length is not None:
            if not length.isdigit():
                raise BadAnswer(f"bad Content-Length {length!r}")
            content_length = self._remaining = int(length)
            state = _LENGTH if self._remaining else _DONE
        else:
            keep_alive = False
            state = _UNTIL_CLOSE
        self._state = state
        self._sink.on_head(Head(status, headers, content_length, keep_alive))
        if state == _DONE:
            self._sink.on_complete()

    def _decode_chunks(self) -> None:
        buffer = self._buffer
        while buffer:
            state = self._state
            if state == _CHUNK_DATA:
                take = min(self._remaining, len(buffer))
                self._sink.on_body(bytes(buffer[:take]))
                del buffer[:take]
                self._remaining -= take
                if self._remaining == 0:
                    self._state = _CHUNK_END
            elif state == _CHUNK_END:
                if len(buffer) < 2:
                    return
                if buffer[:2] != b"\r\n":
                    raise BadAnswer("chunk not followed by CRLF")
                del buffer[:2]
                self._state = _CHUNK_SIZE
            elif state == _CHUNK_SIZE:
                end = buffer.find(b"\r\n")
                if end < 0:
                    if len(buffer) > 1024:
                        raise BadAnswer("chunk size line too long")
                    return
                size_text = bytes(buffer[:end]).split(b";", 1)[0].strip()
                del buffer[: end + 2]
                if not size_text or size_text.strip(_HEX) or len(size_text) > 15:
                    raise BadAnswer(f"bad chunk size {size_text[:20]!r}")
                size = int(size_text, 16)
                self._remaining = size
                self._state = _CHUNK_DATA if size else _TRAILER
            else:  # _TRAILER: trailer fields (none from vLLM) end with an empty line
                end = buffer.find(b"\r\n")
                if end < 0:
                    return
                del buffer[: end + 2]
                if end == 0:
                    self._finish()
                    if buffer:
                        raise BadAnswer("bytes after a complete answer")
                    return
