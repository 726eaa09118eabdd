"""Parsing a replica's HTTP/1.1 answer: bytes in, events out, no I/O.

Built on httptools (llhttp, strict by default: one Content-Length, never with Transfer-Encoding,
digits only and no overflow, CRLF line ends, no NUL or bare LF in headers, 3-digit statuses),
behind a thin layer that adds what llhttp leaves to its caller:

- an answer to HEAD has no body, whatever its Content-Length says (``start(head=True)``): it is
  complete with its head, and its connection is not reused (llhttp cannot be told to skip a
  body, so the answer is cut off there);
- interim answers (1xx, but 101) are skipped, as a client must; 101 and any status outside
  100-599 are refused;
- transfer codings other than ``chunked`` are refused (the proxy passes bodies as they are);
- the head (status line and headers) and trailers may take at most ``MAX_HEAD`` bytes; a
  Content-Length above ``max_body`` is refused before any of it is read (``AnswerTooLong``);
- keep-alive is decided inside the callbacks (llhttp's ``Connection`` token rules);
- no byte may follow a complete answer.

``AnswerParser.feed(data)`` reports on its ``AnswerSink`` the answer's head, each body part
(transfer coding removed) and its end; ``feed_eof()`` says whether the connection closing
completes the answer (a body delimited by the close) or cuts it. Any malformed answer raises
``BadAnswer``, whose message describes the fault without echoing the replica's bytes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import httptools

from proxy.upstream.errors import AnswerTooLong, BadAnswer

MAX_HEAD = 64 * 1024  # an answer's status line and headers together (and its trailers)
DEFAULT_MAX_BODY = 256 * 1024 * 1024  # a Content-Length answer is read whole: this is its cap


@dataclass(slots=True)
class Head:
    status: int
    headers: dict[str, str]  # lower-cased names
    content_length: int | None
    keep_alive: bool


class AnswerSink(Protocol):
    def on_head(self, head: Head) -> None: ...

    def on_body(self, data: bytes) -> None: ...

    def on_complete(self) -> None: ...


class _HeadDone(Exception):
    """Stops llhttp after the head of an answer to HEAD (it would wait for a body)."""


class AnswerParser:
    """Parses one answer per ``start()``; llhttp's callbacks are methods of this class."""

    __slots__ = (
        "_done",
        "_head_bytes",
        "_headers",
        "_is_head",
        "_llhttp",
        "_max_body",
        "_seen_head",
        "_sink",
        "_until_close",
    )

    def __init__(self, sink: AnswerSink, max_body: int = DEFAULT_MAX_BODY) -> None:
        self._sink = sink
        self._max_body = max_body
        self._llhttp: httptools.HttpResponseParser | None = None
        self._done = True
        self._is_head = False
        self._seen_head = False
        self._until_close = False
        self._headers: dict[str, str] = {}
        self._head_bytes = 0

    @property
    def done(self) -> bool:
        return self._done

    def start(self, *, head: bool = False) -> None:
        """Expect a new answer (to a HEAD request when ``head``)."""
        self._llhttp = httptools.HttpResponseParser(self)
        self._done = False
        self._is_head = head
        self._seen_head = False
        self._until_close = False
        self._headers = {}
        self._head_bytes = 0

    def stop(self) -> None:
        """Abandon the answer being read (its connection is being dropped)."""
        self._done = True
        self._llhttp = None

    def feed_eof(self) -> bool:
        """The connection closed: True when that completes the answer."""
        if self._done:
            return True
        if self._until_close and self._seen_head:
            self._finish()
            return True
        return False

    def feed(self, data: bytes) -> None:
        llhttp = self._llhttp
        if self._done or llhttp is None:
            raise BadAnswer("bytes after a complete answer")
        try:
            llhttp.feed_data(data)
        except httptools.HttpParserCallbackError as exc:
            cause = exc.__context__
            if isinstance(cause, _HeadDone):
                return
            if isinstance(cause, BadAnswer):
                raise cause from None
            raise BadAnswer(f"answer rejected ({type(cause).__name__})") from None
        except httptools.HttpParserUpgrade:
            raise BadAnswer("the replica switched protocols") from None
        except httptools.HttpParserError as exc:
            raise BadAnswer(f"not an HTTP/1.1 answer llhttp accepts: {exc}") from None

    # -- llhttp callbacks (raising stops the parse; ``feed`` turns it into BadAnswer) -----------

    def on_message_begin(self) -> None:
        if self._done:
            raise BadAnswer("bytes after a complete answer")

    def on_status(self, status: bytes) -> None:
        self._count(len(status) + 16)

    def on_header(self, name: bytes, value: bytes) -> None:
        self._count(len(name) + len(value) + 4)
        if not self._seen_head:
            self._headers[name.decode("latin-1").lower()] = value.decode("latin-1").strip(" \t")

    def on_headers_complete(self) -> None:
        llhttp = self._llhttp
        assert llhttp is not None
        status = llhttp.get_status_code()
        if status == 101 or not 100 <= status <= 599:
            raise BadAnswer(f"unexpected status {status}")
        if status < 200:  # interim: skipped; the real answer follows
            self._headers = {}
            self._head_bytes = 0
            return
        self._seen_head = True
        headers = self._headers
        transfer = headers.get("transfer-encoding")
        if transfer is not None and transfer.strip().lower() != "chunked":
            raise BadAnswer("unsupported Transfer-Encoding (only chunked is accepted)")
        length_text = headers.get("content-length")
        no_body = self._is_head or status in (204, 304)
        length = int(length_text) if length_text is not None and transfer is None else None
        if length is not None and length > self._max_body and not no_body:
            raise AnswerTooLong(f"Content-Length {length} is above the limit of {self._max_body}")
        keep_alive = llhttp.should_keep_alive() and not self._is_head
        self._until_close = transfer is None and length is None and not no_body
        if self._until_close:
            keep_alive = False
        self._sink.on_head(Head(status, headers, length, keep_alive))
        if self._is_head:
            self._finish()
            raise _HeadDone

    def on_body(self, data: bytes) -> None:
        if self._seen_head:
            self._sink.on_body(data)

    def on_message_complete(self) -> None:
        if self._seen_head and not self._done:
            self._finish()

    def _count(self, size: int) -> None:
        self._head_bytes += size
        if self._head_bytes > MAX_HEAD:
            raise BadAnswer(f"answer head or trailers longer than {MAX_HEAD} bytes")

    def _finish(self) -> None:
        self._done = True
        self._sink.on_complete()
