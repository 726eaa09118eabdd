"""Keep-alive connections to replicas, in two lanes: generation traffic and control calls.

    async with pool.request(replica.url, "POST", "/v1/completions", body, "application/json") as a:
        a.status, a.headers, a.content_length; await a.read() or async for part in a.chunks()

    async with pool.control(replica.url, "GET", "/health", None, timeout_s=2, connect_s=2) as a:
        the same; ``UpstreamClient.call`` reads the answer whole

Leaving the block returns a connection whose answer was read to the end to its lane's idle list;
any other (an error, a cancelled handler, a body left unread) is aborted, which is how a
client's disconnect reaches the replica and cancels the generation there.

Two lanes, one table of origins. The data path (``request``) and the control calls (``control``:
probes, info, adapter loads and pushes, fan-out, scrapes) never share a connection: each lane
keeps its own idle connections per origin, and:

- a control call never waits behind the data path: it takes one of its own lane's idle
  connections or opens one (``_connect_control``), whatever the data lane holds and however many
  data requests wait: a health probe queued behind a burst would eject a replica for being busy;
- the data lane opens at most ``max_connecting`` connections to one replica at once
  (``--max-connects-per-replica``). A request that finds no idle connection and the bound reached
  waits at the proxy, first come first served, for whichever comes first: a connection another
  request releases (handed over directly, so a burst reuses what it opened) or a free connect.
  Thousands of requests at once then queue here instead of overflowing the replicas' accept
  queues, where each connect would wait out the connect timeout. The wait counts against the
  request's own time limit (``AnswerTimeout``: load, not a failed replica); ``drop`` fails the
  waiters of the replica it gives up on;
- ``drop(url)`` gives up on a replica's data lane (its ejection): every data answer still due
  from it fails at once with ``Dropped`` (its connection closed, which cancels the generation
  there), except the ones their callers ``settle``d (a stream whose client has bytes). Control
  connections are unknown to ``drop``: a control call ends by its own deadline and its caller
  judges the outcome (an ejection must not fail the probe that would readmit the replica).
  Nothing per request but a flag: data connections are known by origin from when they open.

Reuse: idle connections are taken last-in first-out and closed after ``idle_s`` (the client's
``KEEPALIVE_S``, below uvicorn's 5 s keep-alive, so the replica does not close one as a request
goes out on it). A reused connection that the replica closed anyway before answering a byte is
retried once on a fresh connection; that is a stale keep-alive, not a failed replica. A streamed
body (``Streamed``) cannot be sent twice: it always goes on a fresh connection, never reused.

Time and size: ``connect_timeout_s`` bounds opening a data connection (``ConnectTimeout``: the
time a connect takes, not the time it waited for its turn),
``request_timeout_s`` the whole data request, body included (``AnswerTimeout``), and a data
answer read whole (it has a Content-Length) may be at most ``max_answer_bytes`` long. A control
call brings its own ``timeout_s`` and ``connect_s`` (for a streamed body the deadline counts from
the body's end: its caller paces and watches the sending), and its connections refuse a
Content-Length above ``CONTROL_ANSWER_LIMIT``. https:// replicas are reached over TLS with the
given context; the URL's path, if any, is prefixed to every request target (``dial.origin_of``).
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterable, AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from types import TracebackType
from weakref import WeakSet

from proxy.upstream.connection import Connection
from proxy.upstream.dial import Origin, dial, origin_of
from proxy.upstream.errors import Disconnected, Dropped
from proxy.upstream.line import Line
from proxy.upstream.parser import DEFAULT_MAX_BODY

# A control call's answer is read whole (health, models, server info, fan-out, metrics): its cap.
CONTROL_ANSWER_LIMIT = 16 * 1024 * 1024
DEFAULT_MAX_CONNECTING = 32  # data connections being opened to one replica at once


@dataclass(frozen=True, slots=True)
class Streamed:
    """A request body sent as ``chunks`` yields it: ``length`` bytes of ``content_type`` in all,
    announced by ``Content-Length`` (never chunked)."""

    chunks: AsyncIterable[bytes]
    length: int
    content_type: str


class ConnectionPool:
    def __init__(
        self,
        *,
        connect_timeout_s: float,
        request_timeout_s: float,
        idle_s: float,
        max_answer_bytes: int = DEFAULT_MAX_BODY,
        tls: ssl.SSLContext | None = None,
        headers: dict[str, str] | None = None,
        max_connecting: int = DEFAULT_MAX_CONNECTING,
    ) -> None:
        self.connect_timeout_s = connect_timeout_s
        self.max_connecting = max_connecting
        self.request_timeout_s = request_timeout_s
        self.idle_s = idle_s
        self.max_answer_bytes = max_answer_bytes
        self._tls = tls
        self._extra = "".join(f"{k}: {v}\r\n" for k, v in (headers or {}).items())
        self._origins: dict[str, Origin] = {}
        self._idle: dict[tuple[str, bool], list[Connection]] = {}  # by (origin key, control)
        self._open: dict[str, WeakSet[Connection]] = {}  # the data lane's, by origin key
        self._drops: dict[str, Dropped] = {}  # by origin key, the latest (seen by connects)
        self._connecting: dict[str, int] = {}  # data connects under way, by origin key
        self._line = Line(self._put)  # data requests waiting for a connection
        self._loop = asyncio.get_running_loop()
        self._sweeper: asyncio.TimerHandle | None = self._loop.call_later(idle_s, self._sweep)
        self.opened = 0  # connections opened so far (a gauge of keep-alive working)

    def request(
        self,
        url: str,
        method: str,
        path_qs: str,
        body: bytes,
        content_type: str,
        extra: bytes = b"",
    ) -> Request:
        """A data request for ``url``; ``extra``: more header lines, each ending in CRLF."""
        origin = self._origins.get(url)
        if origin is None:
            origin = self._origins[url] = origin_of(url, self._tls, self._extra)
        head = b"%s %s%s HTTP/1.1\r\n%s%sContent-Type: %s\r\nContent-Length: %d\r\n\r\n" % (
            method.encode("ascii"),
            origin.prefix,
            path_qs.encode("latin-1"),
            origin.head,
            extra,
            content_type.encode("latin-1"),
            len(body),
        )
        return Request(self, origin, head + body if body else head, method == "HEAD")

    @asynccontextmanager
    async def control(
        self,
        url: str,
        method: str,
        path_qs: str,
        body: bytes | Streamed | None,
        *,
        timeout_s: float,
        connect_s: float,
    ) -> AsyncIterator[Connection]:
        """A control call to ``url`` on the control lane: its connection once the answer's
        head has arrived. A bytes body goes as ``application/json`` (the control plane's one
        type); a ``Streamed`` one says its own."""
        origin = self._origins.get(url)
        if origin is None:
            origin = self._origins[url] = origin_of(url, self._tls, self._extra)
        if isinstance(body, Streamed):
            wire = _head(origin, method, path_qs, body.content_type, body.length)
            connection = await self._connect_control(origin, connect_s)
            try:
                await connection.upload(wire, body.chunks, body.length, timeout_s)
            except BaseException:
                connection.finish()
                raise
        else:
            if body is None:
                wire = _head(origin, method, path_qs, None, None)
            else:
                wire = _head(origin, method, path_qs, "application/json", len(body)) + body
            deadline = self._loop.time() + timeout_s
            connection = await self._exchange(
                origin, wire, deadline, connect_s, control=True, head=method == "HEAD"
            )
        try:
            yield connection
        finally:
            self.release(connection)

    def close(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
            self._sweeper = None
        for idle in self._idle.values():
            for connection in idle:
                connection.abort()
        self._idle.clear()

    def drop(self, url: str, reason: str) -> int:
        """Give up on ``url``'s replica: its data answers still due fail with
        ``Dropped(reason)``. Returns how many data connections were open to it."""
        origin = self._origins.get(url)
        if origin is None:
            return 0
        error = self._drops[origin.key] = Dropped(reason)
        found = list(self._open.get(origin.key, ()))
        for connection in found:
            connection.drop(error)
        self._line.fail(origin.key, error)
        return len(found)

    def waiting(self, url: str) -> int:
        """Data requests waiting for a connection to ``url``'s replica."""
        origin = self._origins.get(url)
        return self._line.waiting(origin.key) if origin is not None else 0

    @property
    def idle(self) -> int:
        return sum(len(idle) for idle in self._idle.values())

    async def open(self, origin: Origin, wire: bytes, *, head: bool = False) -> Connection:
        """Send the data request ``wire`` on an idle data connection to ``origin`` or a new one;
        returns the connection once the answer's head has arrived."""
        deadline = self._loop.time() + self.request_timeout_s
        return await self._exchange(
            origin, wire, deadline, self.connect_timeout_s, control=False, head=head
        )

    def release(self, connection: Connection) -> None:
        """End a request: keep the connection for the next one of its lane if its answer was
        read whole (and the pool is not closed)."""
        if connection.finish():
            if self._sweeper is None:
                connection.abort()
            elif connection.control or not self._line.hand_over(connection):
                self._put(connection)

    # -- internals --------------------------------------------------------------------------

    async def _exchange(
        self,
        origin: Origin,
        wire: bytes,
        deadline: float,
        connect_s: float,
        *,
        control: bool,
        head: bool,
    ) -> Connection:
        """``wire`` on an idle connection of the lane or a new one. A reused connection that
        the replica closed before answering a byte (a stale keep-alive) is retried once on a
        fresh connection."""
        connection = self._take_idle((origin.key, control))
        if connection is not None:
            try:
                return await _send(connection, wire, deadline, head)
            except Disconnected:
                if connection.received:
                    raise
        if control:
            timeout = min(connect_s, max(deadline - self._loop.time(), 0.0))
            fresh = await self._connect_control(origin, timeout)
        else:
            fresh = await self._data_connection(origin, deadline, connect_s)
        return await _send(fresh, wire, deadline, head)

    async def _data_connection(
        self, origin: Origin, deadline: float, connect_s: float
    ) -> Connection:
        """A released data connection handed over, or a new one within ``max_connecting``
        (the module docstring); ``AnswerTimeout`` when none came before ``deadline``."""
        key = origin.key
        while True:
            idle = self._take_idle((key, False))
            if idle is not None:
                return idle
            if self._connecting.get(key, 0) < self.max_connecting:
                break
            handed = await self._line.wait(key, deadline)
            if handed is not None:
                return handed
        self._connecting[key] = self._connecting.get(key, 0) + 1
        try:
            timeout = min(connect_s, max(deadline - self._loop.time(), 0.0))
            return await self._connect(origin, timeout)
        finally:
            self._connecting[key] -= 1
            self._line.next(key)

    def _take_idle(self, lane: tuple[str, bool]) -> Connection | None:
        idle = self._idle.get(lane)
        if not idle:
            return None
        oldest_usable = self._loop.time() - self.idle_s
        while idle:
            connection = idle.pop()
            if not connection.closed and connection.idle_since > oldest_usable:
                return connection
            connection.abort()
        return None

    def _put(self, connection: Connection) -> None:
        connection.idle_since = self._loop.time()
        lane = (connection.origin_key, connection.control)
        idle = self._idle.get(lane)
        if idle is None:
            idle = self._idle[lane] = []
        idle.append(connection)

    async def _connect(self, origin: Origin, limit_s: float) -> Connection:
        """A new data connection (the data lane's only way to open one)."""
        drop = self._drops.get(origin.key)  # one while the connect is under way: dropped too
        connection = await dial(origin, lambda: self._born(origin), limit_s)
        self.opened += 1
        latest = self._drops.get(origin.key)
        if latest is not drop and latest is not None:  # given up on while connecting
            connection.abort()
            raise latest
        return connection

    async def _connect_control(self, origin: Origin, limit_s: float) -> Connection:
        """A new control connection: outside the data lane, unknown to ``drop``."""
        connection = await dial(
            origin, lambda: Connection(origin.key, CONTROL_ANSWER_LIMIT, control=True), limit_s
        )
        self.opened += 1
        return connection

    def _born(self, origin: Origin) -> Connection:
        connection = Connection(origin.key, self.max_answer_bytes)
        known = self._open.get(origin.key)
        if known is None:
            known = self._open[origin.key] = WeakSet()
        known.add(connection)
        return connection

    def _sweep(self) -> None:
        """Close connections idle for longer than ``idle_s`` (the oldest are at the front)."""
        oldest_usable = self._loop.time() - self.idle_s
        for idle in self._idle.values():
            expired = 0
            for connection in idle:
                if connection.idle_since > oldest_usable and not connection.closed:
                    break
                connection.abort()
                expired += 1
            del idle[:expired]
        self._sweeper = self._loop.call_later(self.idle_s / 2, self._sweep)


def _head(
    origin: Origin, method: str, path_qs: str, content_type: str | None, length: int | None
) -> bytes:
    """A control request's head (``length``: its body's, None without one): a Content-Length
    for any body, and 0 for a bodiless method other than GET and HEAD (RFC 9110, 8.6)."""
    target = origin.prefix + path_qs.encode("ascii")
    lines = [b"%s %s HTTP/1.1\r\n" % (method.encode("ascii"), target), origin.head]
    if content_type is not None:
        lines.append(b"Content-Type: %s\r\n" % content_type.encode("latin-1"))
    if length is not None or method not in ("GET", "HEAD"):
        lines.append(b"Content-Length: %d\r\n" % (length or 0))
    lines.append(b"\r\n")
    return b"".join(lines)


async def _send(connection: Connection, wire: bytes, deadline: float, head: bool) -> Connection:
    try:
        await connection.exchange(wire, deadline, head=head)
    except BaseException:
        connection.finish()
        raise
    return connection


class Request:
    """One data request on a pooled connection: ``async with`` it for the answer's connection."""

    __slots__ = ("_connection", "_head", "_origin", "_pool", "_wire")

    def __init__(self, pool: ConnectionPool, origin: Origin, wire: bytes, head: bool) -> None:
        self._pool = pool
        self._origin = origin
        self._wire = wire
        self._head = head
        self._connection: Connection | None = None

    async def __aenter__(self) -> Connection:
        self._connection = await self._pool.open(self._origin, self._wire, head=self._head)
        return self._connection

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._connection is not None:
            self._pool.release(self._connection)
