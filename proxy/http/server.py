"""Serving the app: what a client connection may cost, and how bad input is logged.

aiohttp parses and answers; this module bounds what one client (or many) can hold:
- ``max_connections`` client connections that have sent something at once. At the cap, a new
  one takes the place of the oldest keep-alive connection idle for ``IDLE_YIELD_S`` at least
  (between requests it holds nothing; it is closed, as its keep-alive timeout would close it);
  only when none is, the new one is answered 503 and closed before aiohttp reads a request from
  it: the bytes of the error table's answer to ``TooManyConnections``, each refusal counted by
  the table (``proxy.http.errors.ErrorAnswers.refusal``). So a client pool left open after a
  burst never locks the trainer out, and the cap still holds. The idle connections are kept in
  the order they went idle: finding the oldest costs O(1). Connections that have sent nothing
  yet are not counted (``SILENT_PER_CAP`` times the cap of them at most, for the descriptors'
  sake): they cannot lock clients out;
- ``head_timeout_s``: a request head must be complete in time, measured from its first byte, or
  from the connection's opening for its first request (a connection that sends nothing is closed
  then, not at the keep-alive timeout), without an answer (a head that never ended is no
  request to answer; ``Guard.head_timeouts`` counts them); checked by a sweep every
  ``head_timeout_s / 2``;
- ``keepalive_timeout_s``: an idle connection is closed (aiohttp's own timer, which also closes
  a connection that never completes a head);
- ``send_timeout_s``: a client that stops reading its answer (the socket's send buffer stays full
  this long) is disconnected, which frees its slot and cancels its generation; nothing is timed
  while a client reads (the timer runs only between the transport's ``pause_writing`` and
  ``resume_writing``);
- the body limit, timeout and memory budget are the body reader's (``bodies.BodyReader``);
- a bad request from a client (aiohttp's parse errors) is logged at WARNING once per kind,
  without a traceback, and counted (``client_log``); our own errors keep their tracebacks.

Every connection goes through a ``GuardedConnection``, a thin protocol in front of aiohttp's
(one extra call and a clock read per read); handlers tell it when a request starts and ends
(``Guard.busy``). The guard tells time by the proxy's ``Clock`` (tests drive it).

Only aiohttp's public API is used (no private name; tests/unit/test_aiohttp_surface.py checks
what the guard relies on, naming the aiohttp version when an upgrade changes it): the runner's
``server`` is the protocol factory aiohttp documents for ``loop.create_server`` (its low-level
server), and ``serving`` makes the listening socket itself with the guard in front, instead of
an aiohttp site (a site builds its listener from ``runner.server`` with no way to wrap it).
"""

from __future__ import annotations

import asyncio
import logging
import resource
import socket
import ssl
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any, cast

from aiohttp import web

from proxy.clock import Clock, Timer
from proxy.config import ClientSettings
from proxy.http.listen import BACKLOG, cannot_listen

log = logging.getLogger("proxy.server")

LINGER_S = 2.0  # after refusing a body, read (and drop) what the client still sends, this long
SILENT_PER_CAP = 2  # connections that sent nothing yet, at most, per --max-client-connections
# At the cap, a keep-alive connection idle this long yields to a new client. Shorter races a
# request already in the kernel's buffer (TRL's load_lora_adapter is a POST, never retried).
IDLE_YIELD_S = 1.0


class GuardedConnection(asyncio.Protocol):
    """aiohttp's protocol for one client connection, noting when a request head begins."""

    __slots__ = (
        "_busy", "_guard", "_inner", "_now", "_refused", "_stalled",
        "head_at", "spoke", "transport",
    )  # fmt: skip

    def __init__(self, guard: Guard, inner: asyncio.Protocol) -> None:
        self._guard = guard
        self._inner = inner
        self._now = guard.clock.monotonic
        self._busy = 0  # requests being handled on this connection
        self.head_at = self._now()  # when a request head began arriving (0: none is); the
        # first one's clock starts at the connection's opening
        self.spoke = False  # it has sent a byte (it counts against the cap from then on)
        self._refused = False  # its first bytes found the cap full: answered 503, closing
        self._stalled: Timer | None = None  # the client is not reading
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)
        self._guard.opened(self)
        self._inner.connection_made(transport)

    def connection_lost(self, exc: Exception | None) -> None:
        if self._stalled is not None:
            self._stalled.cancel()
            self._stalled = None
        self._guard.closed(self)
        self._inner.connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if not self.spoke:
            if self._refused or not self._guard.spoke(self):
                self._refused = True  # the cap is full of connections in use
                return
            self.spoke = True
        if not self._busy and not self.head_at:
            self.head_at = self._now()
            self._guard.working(self)
        self._inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self._inner.eof_received()

    def pause_writing(self) -> None:
        if self._stalled is None:
            guard = self._guard
            self._stalled = guard.clock.call_later(guard.send_timeout_s, self._send_expired)
        self._inner.pause_writing()

    def resume_writing(self) -> None:
        if self._stalled is not None:
            self._stalled.cancel()
            self._stalled = None
        self._inner.resume_writing()

    def _send_expired(self) -> None:
        self._stalled = None
        if self.transport is not None:
            self.transport.abort()

    def started(self) -> None:
        self._busy += 1
        self.head_at = 0.0
        self._guard.working(self)

    def finished(self) -> None:
        self._busy -= 1
        if not self._busy and not self.head_at:
            self._guard.idle(self, self._now())

    def head_overdue(self, deadline: float) -> bool:
        """A request head that began before ``deadline`` and is still not complete."""
        return not self._busy and 0.0 < self.head_at < deadline


class Guard:
    """Client connections: the cap (and who yields at it), the head timeout, and a request's
    way back to its connection. Heads are timed by one sweep every ``head_timeout_s / 2`` over
    the open connections (O(connections), off the request path), not by a timer per request."""

    def __init__(self, settings: ClientSettings, refuse: Callable[[], bytes], clock: Clock) -> None:
        self.max_connections = settings.max_connections
        self.head_timeout_s = settings.head_timeout_s
        self.send_timeout_s = settings.send_timeout_s
        self.clock = clock
        self._refuse = refuse  # counts a refusal, gives its answer's bytes
        self._open: dict[asyncio.BaseTransport, GuardedConnection] = {}
        self._speaking = 0  # open connections that have sent something
        # Speaking connections between requests, oldest idle first: connection -> since when.
        self._idle: OrderedDict[GuardedConnection, float] = OrderedDict()
        self._sweeper: Timer | None = None
        self.head_timeouts = 0
        self.yielded = 0  # idle connections closed for a new client at the cap

    @property
    def connections(self) -> int:
        return len(self._open)

    @property
    def idle_connections(self) -> int:
        """Speaking connections between requests (those that may yield at the cap)."""
        return len(self._idle)

    @property
    def speaking(self) -> int:
        """Open connections that have sent something (what the cap counts)."""
        return self._speaking

    def start(self) -> None:
        self._sweeper = self.clock.call_later(self.head_timeout_s / 2, self._sweep)

    def stop(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
            self._sweeper = None

    def _sweep(self) -> None:
        deadline = self.clock.monotonic() - self.head_timeout_s
        for connection in list(self._open.values()):
            if connection.head_overdue(deadline) and connection.transport is not None:
                self.head_timeouts += 1
                connection.transport.close()
        self._sweeper = self.clock.call_later(self.head_timeout_s / 2, self._sweep)

    def factory(self, inner: Callable[[], asyncio.Protocol]) -> Callable[[], asyncio.Protocol]:
        def make() -> asyncio.Protocol:
            silent = len(self._open) - self._speaking
            full = self._speaking >= self.max_connections and not self._yield()
            if full or silent >= SILENT_PER_CAP * self.max_connections:
                return _Refusal(self._refuse())
            return GuardedConnection(self, inner())

        return make

    def idle(self, connection: GuardedConnection, since: float) -> None:
        """``connection`` is between requests from ``since`` on."""
        if connection.spoke:
            self._idle[connection] = since

    def working(self, connection: GuardedConnection) -> None:
        """A request began arriving on ``connection``, or is being handled."""
        self._idle.pop(connection, None)

    def _yield(self) -> bool:
        """At the cap: close the oldest connection idle for ``IDLE_YIELD_S`` at least, its
        place taken at once; False when none has been."""
        if not self._idle:
            return False
        connection, since = next(iter(self._idle.items()))
        if self.clock.monotonic() - since < IDLE_YIELD_S:
            return False
        self._idle.pop(connection)
        self._forget(connection)
        self.yielded += 1
        if connection.transport is not None:
            connection.transport.close()
        return True

    def opened(self, connection: GuardedConnection) -> None:
        assert connection.transport is not None
        self._open[connection.transport] = connection

    def spoke(self, connection: GuardedConnection) -> bool:
        """``connection`` sent its first bytes: counted (True; an idle one yields it a place at
        the cap), or answered 503 and closed."""
        if self._speaking >= self.max_connections and not self._yield():
            answer = self._refuse()
            if connection.transport is not None:
                _Refusal(answer).connection_made(connection.transport)
            return False
        self._speaking += 1
        return True

    def closed(self, connection: GuardedConnection) -> None:
        self._idle.pop(connection, None)
        self._forget(connection)

    def _forget(self, connection: GuardedConnection) -> None:
        """No longer counted (closed, or closing to yield its place): once only."""
        if connection.transport is None:
            return
        gone = self._open.pop(connection.transport, None)
        if gone is not None and gone.spoke:
            self._speaking -= 1

    def busy(self, transport: asyncio.BaseTransport | None) -> GuardedConnection | None:
        """The connection a request arrived on, marked busy until ``finished()``."""
        connection = self._open.get(transport) if transport is not None else None
        if connection is not None:
            connection.started()
        return connection


class _Refusal(asyncio.Protocol):
    """Writes ``answer`` (the cap's refusal) and closes."""

    def __init__(self, answer: bytes) -> None:
        self._answer = answer

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        cast(asyncio.Transport, transport).write(self._answer)
        cast(asyncio.Transport, transport).close()


def runner_options(
    settings: ClientSettings, logger: logging.Logger, shutdown_timeout: float
) -> dict[str, Any]:
    """How the app is served (cli and tests alike). aiohttp cancels a handler whose client has
    gone, which closes the upstream request and so cancels the generation on the replica."""
    return {
        "handler_cancellation": True,
        "access_log": None,
        "keepalive_timeout": settings.keepalive_timeout_s,
        "lingering_time": LINGER_S,
        "logger": logger,
        "shutdown_timeout": shutdown_timeout,
    }


@asynccontextmanager
async def serving(
    app: web.Application,
    guard: Guard,
    logger: logging.Logger,
    settings: ClientSettings,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    shutdown_timeout: float = 2.0,
    ssl_context: ssl.SSLContext | None = None,
    sock: socket.socket | None = None,
) -> AsyncIterator[str]:
    """Serve ``app`` on ``host:port`` (0: an ephemeral port), or on ``sock``, a listening socket
    handed down (``listening_socket``); yield its base URL; clean up.

    The listener is ours, every connection through ``guard.factory(runner.server)``. It is
    opened before the app starts and accepts once the app has: a port that cannot be opened
    raises ``CannotListen`` with nothing started (no session, no background task, no probe
    logged). On the way out it stops accepting first, then ``runner.cleanup()`` closes the open
    connections and runs the app's cleanup (the order an aiohttp site keeps)."""
    runner = web.AppRunner(
        app, handle_signals=False, **runner_options(settings, logger, shutdown_timeout)
    )

    def handler() -> asyncio.Protocol:  # called per connection, so only once serving
        assert runner.server is not None  # made by setup(), before the listener accepts
        return runner.server()

    try:
        where: dict[str, Any] = {"sock": sock} if sock is not None else {
            "host": host, "port": port, "reuse_address": True,
        }  # fmt: skip
        listener = await asyncio.get_running_loop().create_server(
            guard.factory(handler), ssl=ssl_context, backlog=BACKLOG, start_serving=False, **where
        )
    except OSError as exc:  # the port cannot be had: one line saying why, nothing started
        raise cannot_listen(host, port, exc) from None
    try:
        await runner.setup()
    except BaseException:  # the app did not start: the listener is ours to close
        listener.close()
        raise
    try:
        await listener.start_serving()
        if listener.sockets:
            port = listener.sockets[0].getsockname()[1]
        guard.start()
        yield f"{'https' if ssl_context else 'http'}://{host}:{port}"
    finally:
        guard.stop()
        listener.close()
        await runner.cleanup()


def raise_fd_limit() -> tuple[int, int]:
    """Raise the soft open-files limit to the hard one; returns (soft, hard) as set."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError) as exc:  # refused by the system: run with what it has
            log.warning("could not raise the open-files limit from %d: %s", soft, exc)
    return soft, hard
