"""One HTTP/1.1 keep-alive connection to a replica, and the answer being read on it.

The generation path's upstream leg, kept lean on purpose: the request goes out as one write of
bytes the caller prepared (request line, headers, the client's original body), and the answer
is parsed just enough to pass it on: the status line, the headers, then the body by
Content-Length, by chunked transfer coding (decoded; vLLM's server-sent events come this way) or
until the connection closes. A whole answer that arrives in one read is complete without
another wake-up of the reader. Everything else about HTTP (redirects, cookies, compression,
proxies) is deliberately absent: a replica is a vLLM server or a stand-in for one.

Failures are ``WireError`` subclasses: ``Disconnected`` (the connection closed or reset before
the answer was complete) and ``BadAnswer`` (not HTTP/1.x this parser accepts). A request's total
time limit is enforced here (``TimeoutError``), so the caller needs no timer of its own.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator
from typing import Final, cast

MAX_HEAD = 64 * 1024  # an answer's status line and headers together
_PAUSE_AT: Final = 1 << 20  # unread streamed bytes that pause reading from the replica
_RESUME_AT: Final = 1 << 18
_HEX: Final = b"0123456789abcdefABCDEF"


class WireError(Exception):
    """The replica could not be reached, or dropped or garbled the answer."""


class ConnectError(WireError):
    """No connection could be opened."""


class ConnectTimeout(ConnectError):
    """Opening the connection took longer than the connect timeout."""


class Disconnected(WireError):
    """The connection closed or reset before the answer was complete."""


class BadAnswer(WireError):
    """The replica's bytes are not an HTTP/1.x answer this client accepts."""


# Body framing of the answer being read.
_HEAD, _LENGTH, _CHUNK_SIZE, _CHUNK_DATA, _CHUNK_END, _TRAILER, _UNTIL_CLOSE, _DONE = range(8)


class Connection(asyncio.Protocol):
    """An asyncio protocol carrying one request at a time; reusable when an answer completes."""

    def __init__(self, origin_key: str) -> None:
        self.origin_key = origin_key
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.idle_since = 0.0
        self._loop = asyncio.get_running_loop()
        self._state = _DONE
        self._buffer = bytearray()
        self._remaining = 0  # body bytes (or chunk bytes) still to come
        self._parts: deque[bytes] = deque()
        self._unread = 0  # bytes in _parts
        self._paused = False
        self._streaming = False  # the body is consumed as it arrives: reading may pause
        self._waiter: asyncio.Future[None] | None = None
        self._error: BaseException | None = None
        self._timer: asyncio.TimerHandle | None = None
        self.received = False  # any byte of the current answer has arrived
        # The current answer's head:
        self.status = 0
        self.headers: dict[str, str] = {}
        self.content_length: int | None = None
        self.keep_alive = True

    # -- asyncio.Protocol -------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self._state == _UNTIL_CLOSE:
            self._state = _DONE
        elif self._state != _DONE and self._error is None:
            self._error = Disconnected(
                f"connection closed by the replica ({type(exc).__name__ if exc else 'EOF'})"
                if self.received
                else "connection closed before any answer"
            )
        self._wake()

    def data_received(self, data: bytes) -> None:
        if self._state == _DONE:
            self.abort()  # bytes nobody asked for: the connection cannot be trusted any more
            return
        self.received = True
        try:
            self._feed(data)
        except BadAnswer as exc:
            self._error = exc
            self.abort()
        self._wake()

    def eof_received(self) -> bool:
        return False  # close the transport; connection_lost settles the answer

    # -- the request ------------------------------------------------------------------------

    async def exchange(self, request: bytes, deadline: float) -> None:
        """Send ``request``; return once the answer's head has arrived (``status``, ...)."""
        assert self.transport is not None
        if self.closed:
            raise Disconnected("connection closed before any answer")
        self._state = _HEAD
        self.received = False
        self._error = None
        self._buffer.clear()
        self._parts.clear()
        self._unread = 0
        self._streaming = False
        if self._paused:
            self._paused = False
            self.transport.resume_reading()
        self._timer = self._loop.call_at(deadline, self._expire)
        self.transport.write(request)
        while self._state == _HEAD:
            await self._wait()

    @property
    def complete(self) -> bool:
        return self._state == _DONE and self._error is None

    async def read(self) -> bytes:
        """The whole body (the caller reads either this way or through ``chunks``)."""
        while self._state != _DONE:
            await self._wait()
        self._raise_error()
        data = b"".join(self._parts)
        self._parts.clear()
        return data

    async def chunks(self) -> AsyncIterator[bytes]:
        """The body as it arrives, chunk coding removed. Reading from the replica pauses while
        more than a MiB waits for the caller."""
        self._streaming = True
        while True:
            while self._parts:
                part = self._parts.popleft()
                self._unread -= len(part)
                if self._paused and self._unread <= _RESUME_AT and self.transport is not None:
                    self._paused = False
                    self.transport.resume_reading()
                yield part
            if self._state == _DONE:
                self._raise_error()
                return
            await self._wait()

    def finish(self) -> bool:
        """End the request. True if the connection may carry another one."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        reusable = self.complete and self.keep_alive and not self.closed and not self._parts
        if not reusable:
            self._state = _DONE
            self.abort()
        return reusable

    def abort(self) -> None:
        """Drop the connection at once (the replica sees a disconnect and stops generating)."""
        self.closed = True
        if self.transport is not None:
            self.transport.abort()

    # -- internals --------------------------------------------------------------------------

    async def _wait(self) -> None:
        self._raise_error()
        waiter = self._loop.create_future()
        self._waiter = waiter
        try:
            await waiter
        finally:
            self._waiter = None
        self._raise_error()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _raise_error(self) -> None:
        if self._error is not None:
            raise self._error

    def _expire(self) -> None:
        self._timer = None
        if self._state != _DONE:
            self._error = TimeoutError("the replica did not finish its answer in time")
            self.abort()
            self._wake()

    def _emit(self, part: bytes) -> None:
        self._parts.append(part)
        self._unread += len(part)
        if self._streaming and not self._paused and self._unread >= _PAUSE_AT:
            assert self.transport is not None
            self._paused = True
            self.transport.pause_reading()

    def _feed(self, data: bytes) -> None:
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
            self._emit(data)
        elif state == _DONE:
            raise BadAnswer("bytes after a complete answer")
        else:
            self._buffer += data
            self._decode_chunks()

    def _take_length(self, data: bytes) -> None:
        if len(data) > self._remaining:
            raise BadAnswer("more body bytes than Content-Length announced")
        self._emit(data)
        self._remaining -= len(data)
        if self._remaining == 0:
            self._state = _DONE

    def _parse_head(self, head: bytes) -> None:
        lines = head.split(b"\r\n")
        status_line = lines[0]
        version, _, rest = status_line.partition(b" ")
        code = rest[:3]
        if not version.startswith(b"HTTP/1.") or len(code) != 3 or not code.isdigit():
            raise BadAnswer(f"not an HTTP/1.x status line: {status_line[:80]!r}")
        self.status = int(code)
        headers: dict[str, str] = {}
        for line in lines[1:]:
            name, colon, value = line.partition(b":")
            if not colon or not name or name != name.strip():
                raise BadAnswer(f"malformed header line: {line[:80]!r}")
            headers[name.decode("latin-1").lower()] = value.strip().decode("latin-1")
        self.headers = headers
        connection = headers.get("connection", "").lower()
        if version == b"HTTP/1.0":
            self.keep_alive = connection == "keep-alive"
        else:
            self.keep_alive = connection != "close"
        if 100 <= self.status < 200:
            raise BadAnswer(f"unexpected interim answer HTTP {self.status}")
        transfer = headers.get("transfer-encoding")
        length = headers.get("content-length")
        self.content_length = None
        if self.status in (204, 304):
            self._state = _DONE
        elif transfer is not None:
            if transfer.lower() != "chunked":
                raise BadAnswer(f"unsupported Transfer-Encoding {transfer!r}")
            self._state = _CHUNK_SIZE
        elif length is not None:
            if not length.isdigit():
                raise BadAnswer(f"bad Content-Length {length!r}")
            self.content_length = self._remaining = int(length)
            self._state = _LENGTH if self._remaining else _DONE
        else:
            self.keep_alive = False
            self._state = _UNTIL_CLOSE

    def _decode_chunks(self) -> None:
        buffer = self._buffer
        while buffer:
            state = self._state
            if state == _CHUNK_DATA:
                take = min(self._remaining, len(buffer))
                self._emit(bytes(buffer[:take]))
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
                    self._state = _DONE
                    if buffer:
                        raise BadAnswer("bytes after a complete answer")
                    return
