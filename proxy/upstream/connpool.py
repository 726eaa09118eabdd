"""Keep-alive connections to replicas for generation traffic, and the request that uses one.

    async with pool.request(replica.url, "POST", "/v1/completions", body, "application/json") as a:
        a.status, a.headers, a.content_length; await a.read() or async for part in a.chunks()

Leaving the block returns a connection whose answer was read to the end to the pool; any other
(an error, a cancelled handler, a body left unread) is aborted, which is how a client's
disconnect reaches the replica and cancels the generation there.

- Idle connections are reused last-in first-out and closed after ``idle_s`` (the client's
  ``KEEPALIVE_S``, below uvicorn's 5 s keep-alive, so the replica does not close one as a request
  goes out on it). A reused connection that the replica closed anyway before answering a byte is
  retried once on a fresh connection; that is a stale keep-alive, not a failed replica.
- ``connect_timeout_s`` bounds opening a connection (``ConnectTimeout``); ``request_timeout_s``
  bounds the whole request, body included (``AnswerTimeout``); an answer read whole (it has a
  Content-Length) may be at most ``max_answer_bytes`` long.
- ``drop(url)`` gives up on a replica (its ejection): every answer still due from it fails at
  once with ``Dropped`` (its connection closed, which cancels the generation there), except the
  ones their callers ``settle``d (a stream whose client has bytes). Nothing per request but a
  flag: the connections are known by origin from when they open.
- https:// replicas are reached over TLS with the given context; the URL's path, if any, is
  prefixed to every request target.
"""

from __future__ import annotations

import asyncio
import ssl
from dataclasses import dataclass
from types import TracebackType
from urllib.parse import urlsplit
from weakref import WeakSet

from proxy.upstream.connection import Connection
from proxy.upstream.errors import (
    LOCAL_ERRNOS,
    ConnectError,
    ConnectTimeout,
    Disconnected,
    Dropped,
    LocalResourceError,
)
from proxy.upstream.parser import DEFAULT_MAX_BODY

USER_AGENT = "rollout-proxy"


@dataclass(frozen=True, slots=True)
class Origin:
    """Where a replica URL's requests go, and the header lines every request to it carries."""

    key: str
    host: str
    port: int
    tls: ssl.SSLContext | None
    prefix: bytes  # the URL's path, prefixed to request targets
    head: bytes  # Host, User-Agent and extra header lines, each ending in CRLF


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
    ) -> None:
        self.connect_timeout_s = connect_timeout_s
        self.request_timeout_s = request_timeout_s
        self.idle_s = idle_s
        self.max_answer_bytes = max_answer_bytes
        self._tls = tls
        self._extra = "".join(f"{k}: {v}\r\n" for k, v in (headers or {}).items())
        self._origins: dict[str, Origin] = {}
        self._idle: dict[str, list[Connection]] = {}
        self._open: dict[str, WeakSet[Connection]] = {}  # by origin key
        self._drops: dict[str, Dropped] = {}  # by origin key, the latest (seen by connects)
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
        """A request for ``url``; ``extra``: more header lines, each ending in CRLF."""
        origin = self._origins.get(url)
        if origin is None:
            origin = self._origins[url] = self._origin(url)
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

    def close(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
            self._sweeper = None
        for idle in self._idle.values():
            for connection in idle:
                connection.abort()
        self._idle.clear()

    def drop(self, url: str, reason: str) -> int:
        """Give up on ``url``'s replica: its answers still due fail with ``Dropped(reason)``.
        Returns how many connections were open to it."""
        origin = self._origins.get(url)
        if origin is None:
            return 0
        error = self._drops[origin.key] = Dropped(reason)
        found = list(self._open.get(origin.key, ()))
        for connection in found:
            connection.drop(error)
        return len(found)

    @property
    def idle(self) -> int:
        return sum(len(idle) for idle in self._idle.values())

    # -- internals --------------------------------------------------------------------------

    def _origin(self, url: str) -> Origin:
        parts = urlsplit(url)  # validated once where it entered (config.check_replica_url)
        https = parts.scheme == "https"
        port = parts.port or (443 if https else 80)
        host_header = parts.netloc.rpartition("@")[2]
        head = f"Host: {host_header}\r\nUser-Agent: {USER_AGENT}\r\n{self._extra}"
        return Origin(
            key=f"{parts.scheme}://{host_header}",
            host=parts.hostname or "",
            port=port,
            tls=(self._tls or ssl.create_default_context()) if https else None,
            prefix=parts.path.rstrip("/").encode("latin-1"),
            head=head.encode("latin-1"),
        )

    def _take_idle(self, origin: Origin) -> Connection | None:
        idle = self._idle.get(origin.key)
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
        idle = self._idle.get(connection.origin_key)
        if idle is None:
            idle = self._idle[connection.origin_key] = []
        idle.append(connection)

    async def open(self, origin: Origin, wire: bytes, *, head: bool = False) -> Connection:
        """Send ``wire`` on an idle connection to ``origin`` or a new one; returns the connection
        once the answer's head has arrived. A reused connection that the replica closed before
        answering a byte (a stale keep-alive) is retried once on a fresh connection."""
        deadline = self._loop.time() + self.request_timeout_s
        connection = self._take_idle(origin)
        if connection is not None:
            try:
                return await _send(connection, wire, deadline, head)
            except Disconnected:
                if connection.received:
                    raise
        return await _send(await self._connect(origin, deadline), wire, deadline, head)

    def release(self, connection: Connection) -> None:
        """End a request: keep the connection for the next one if its answer was read whole."""
        if connection.finish():
            self._put(connection)

    async def _connect(self, origin: Origin, deadline: float) -> Connection:
        timeout = min(self.connect_timeout_s, max(deadline - self._loop.time(), 0.0))
        drop = self._drops.get(origin.key)  # one while the connect is under way: dropped too
        try:
            async with asyncio.timeout(timeout):
                transport, connection = await self._loop.create_connection(
                    lambda: self._born(origin),
                    origin.host,
                    origin.port,
                    ssl=origin.tls,
                    server_hostname=origin.host if origin.tls is not None else None,
                )
        except TimeoutError:
            raise ConnectTimeout(f"no connection to {origin.key} within {timeout:g} s") from None
        except OSError as exc:
            reason = exc.strerror or str(exc) or type(exc).__name__
            if exc.errno in LOCAL_ERRNOS:
                raise LocalResourceError(f"the proxy cannot open a connection: {reason}") from None
            raise ConnectError(f"cannot connect to {origin.key}: {reason}") from None
        connection.connection_made(transport)  # uvloop may call it only after this returns
        self.opened += 1
        latest = self._drops.get(origin.key)
        if latest is not drop and latest is not None:  # given up on while connecting
            connection.abort()
            raise latest
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


async def _send(connection: Connection, wire: bytes, deadline: float, head: bool) -> Connection:
    try:
        await connection.exchange(wire, deadline, head=head)
    except BaseException:
        connection.finish()
        raise
    return connection


class Request:
    """One request on a pooled connection: ``async with`` it for the answer's connection."""

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
