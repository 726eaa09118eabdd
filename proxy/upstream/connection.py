"""One HTTP/1.1 keep-alive connection to a replica, and the answer being read on it.

The upstream leg of every call to a replica, kept lean on purpose: a request goes out as one
write of bytes the caller prepared (request line, headers, the client's original body), and the
answer is read by ``parser.AnswerParser`` (pure: bytes in, events out) just enough to pass it on.
A whole answer that arrives in one read is complete without another wake-up of the reader.
Everything else about HTTP (redirects, cookies, compression, proxies) is deliberately absent: a
replica is a vLLM server or a stand-in for one.

A large body (an adapter push) goes out as its iterable yields it (``upload``), with the
transport's write flow control: after each piece the sender waits while the transport's buffer
is above its high-water mark (``pause_writing``/``resume_writing``), so memory is what the
iterable holds plus one transport buffer, whatever the body's size. The answer may come before
the body is all sent (a refusal): sending stops there. A connection that carried an upload is
not reused.

Failures are the tree's (``proxy.upstream.errors``), raised where the bytes enter:
``Disconnected`` (the connection closed or reset before the answer was complete: ``disconnected
before answering`` or ``answer cut short``), ``BadAnswer`` (not HTTP/1.x the parser accepts) and
``Dropped`` (the pool gave up on the replica, ``drop``, before the answer was complete and before
the caller ``settle``d it). The call's deadline is enforced here (``AnswerTimeout``), so the
caller needs no timer of its own. One waiter at a time (the request's task), woken by every event
(bytes, a close, the deadline, the buffer draining); it re-checks what it waits for. Reading
from the replica pauses while more than ``PAUSE_AT`` bytes of a streamed answer wait for the
caller.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterable, AsyncIterator
from typing import Final, cast

from proxy.upstream.errors import AnswerTimeout, BadAnswer, Disconnected, Dropped
from proxy.upstream.parser import DEFAULT_MAX_BODY, AnswerParser, Head

CLOSED: Final = "connection closed before any answer"
UNANSWERED: Final = "disconnected before answering"  # the summaries users see (``reasons``)
CUT: Final = "answer cut short"
PAUSE_AT: Final = 1 << 20  # unread streamed bytes that pause reading from the replica
RESUME_AT: Final = 1 << 18


class Connection(asyncio.Protocol):
    """An asyncio protocol carrying one request at a time; reusable when an answer completes.

    ``control``: it carries control calls (its pool keeps it apart from the data path's)."""

    def __init__(
        self, origin_key: str, max_body: int = DEFAULT_MAX_BODY, *, control: bool = False
    ) -> None:
        self.origin_key = origin_key
        self.control = control
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.idle_since = 0.0
        self._loop = asyncio.get_running_loop()
        self._parser = AnswerParser(self, max_body)
        self._parts: deque[bytes] = deque()
        self._unread = 0  # bytes in _parts
        self._paused = False  # reading from the replica
        self._draining = False  # writing to it: the transport's buffer is above its mark
        self._streaming = False  # the body is consumed as it arrives: reading may pause
        self._waiter: asyncio.Future[None] | None = None
        self._error: BaseException | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._headed = False  # the current answer's head has arrived
        self.received = False  # any byte of the current answer has arrived
        self._settled = False  # the caller keeps the current answer whatever befalls its replica
        # The current answer's head:
        self.status = 0
        self.headers: dict[str, str] = {}
        self.content_length: int | None = None
        self.keep_alive = True

    # -- the parser's events ------------------------------------------------------------------

    def on_head(self, head: Head) -> None:
        self.status = head.status
        self.headers = head.headers
        self.content_length = head.content_length
        self.keep_alive = head.keep_alive
        self._headed = True

    def on_body(self, data: bytes) -> None:
        self._parts.append(data)
        self._unread += len(data)
        if self._streaming and not self._paused and self._unread >= PAUSE_AT:
            assert self.transport is not None
            self._paused = True
            self.transport.pause_reading()

    def on_complete(self) -> None:
        pass  # ``done`` on the parser says so; the waiter is woken after the feed

    # -- asyncio.Protocol -------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if not self._parser.feed_eof() and self._error is None:
            if self.received:
                how = type(exc).__name__ if exc else "EOF"
                self._error = Disconnected(f"connection closed by the replica ({how})", CUT)
            else:
                self._error = Disconnected(CLOSED, UNANSWERED)
        self._wake()

    def data_received(self, data: bytes) -> None:
        if self._parser.done:
            self.abort()  # bytes nobody asked for: the connection cannot be trusted any more
            return
        self.received = True
        try:
            self._parser.feed(data)
        except BadAnswer as exc:
            self._error = exc
            self.abort()
        self._wake()

    def eof_received(self) -> bool:
        return False  # close the transport; connection_lost settles the answer

    def pause_writing(self) -> None:
        self._draining = True

    def resume_writing(self) -> None:
        self._draining = False
        self._wake()

    # -- the request ------------------------------------------------------------------------

    async def exchange(self, request: bytes, deadline: float, *, head: bool = False) -> None:
        """Send ``request``; return once the answer's head has arrived (``status``, ...).

        ``head``: the request is a HEAD, so its answer has no body."""
        transport = self._start(head)
        self._timer = self._loop.call_at(deadline, self._expire)
        transport.write(request)
        while not self._headed:
            await self._wait()

    async def upload(
        self, request: bytes, body: AsyncIterable[bytes], length: int, answer_s: float
    ) -> None:
        """Send ``request`` (a head announcing ``length`` bytes of body, never chunked), then
        ``body`` piece by piece as it yields, each write waiting while the transport's buffer is
        full; return once the answer's head has arrived, within ``answer_s`` of the body's end.

        No time limit while the body goes out (its caller paces and watches it). An answer that
        arrives first (a refusal) ends the sending. The connection is not reused after an upload
        (whether the replica read all of the body is not known; a push is rare and large, a new
        connection costs it nothing). An exception ``body`` raises passes through as it is; a
        body of another length than ``length`` is the caller's error (``ValueError``)."""
        transport = self._start(head=False)
        transport.write(request)
        sent = 0
        async for piece in body:
            if self._headed:
                break
            self._raise_error()
            sent += len(piece)
            if sent > length:
                raise ValueError(f"the body is longer than its Content-Length {length}")
            transport.write(piece)
            while self._draining and not self._headed:
                await self._wait()
        else:
            if sent < length:
                raise ValueError(f"the body ended {length - sent} bytes short of {length}")
        self._timer = self._loop.call_later(answer_s, self._expire)
        while not self._headed:
            await self._wait()
        self.keep_alive = False

    def _start(self, head: bool) -> asyncio.Transport:
        """Expect a new answer (to a HEAD request when ``head``); the transport to write to."""
        transport = self.transport
        assert transport is not None
        if self.closed:
            raise Disconnected(CLOSED, UNANSWERED)
        self._parser.start(head=head)
        self._headed = False
        self.received = False
        self._error = None
        self._settled = False
        self._parts.clear()
        self._unread = 0
        self._streaming = False
        if self._paused:
            self._paused = False
            transport.resume_reading()
        return transport

    @property
    def complete(self) -> bool:
        return self._parser.done and self._error is None

    async def read(self) -> bytes:
        """The whole body (the caller reads either this way or through ``chunks``)."""
        while not self._parser.done:
            await self._wait()
        self._raise_error()
        data = b"".join(self._parts)
        self._parts.clear()
        return data

    async def chunks(self) -> AsyncIterator[bytes]:
        """The body as it arrives, chunk coding removed. Reading from the replica pauses while
        more than ``PAUSE_AT`` bytes wait for the caller."""
        self._streaming = True
        while True:
            while self._parts:
                part = self._parts.popleft()
                self._unread -= len(part)
                if self._paused and self._unread <= RESUME_AT and self.transport is not None:
                    self._paused = False
                    self.transport.resume_reading()
                yield part
            if self._parser.done:
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
            self._parser.stop()
            self.abort()
        return reusable

    def settle(self) -> None:
        """The current answer is the caller's from here on (its client has bytes of it): a
        ``drop`` leaves it alone."""
        self._settled = True

    def drop(self, error: Dropped) -> None:
        """The pool gives up on this connection's replica: an answer still due (not complete,
        not ``settle``d) fails with ``error``, and the connection closes, which cancels the
        generation on the replica. An idle connection, a complete, failed or settled answer is
        left as it is."""
        if self._settled or self._parser.done or self._error is not None:
            return
        self._error = error
        self.abort()
        self._wake()

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
        if not self._parser.done:
            self._error = AnswerTimeout("the replica did not finish its answer in time")
            self.abort()
            self._wake()
