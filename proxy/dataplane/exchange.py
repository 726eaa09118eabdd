"""One client request being forwarded (``Exchange``): what every attempt sends and reports,
who it is upstream and back (``Identity``), and an attempt that failed before the client saw a
byte (``Failed``: another replica may be tried)."""

from __future__ import annotations

from dataclasses import dataclass

from aiohttp import web

from proxy.dataplane.ledger import StreamLedger
from proxy.fleet.replica import Replica
from proxy.runs.run import DEFAULT, Run


@dataclass(slots=True)  # made per request: not frozen (see proxy/__init__.py)
class Identity:
    """Who a request is, upstream and back: its id, and the header lines sent to the replica."""

    request_id: str
    upstream: bytes  # ``X-Request-ID: ...\r\n`` (and ``traceparent``), ready for the wire


class Failed(Exception):
    """This attempt failed before the client saw a byte; another replica may be tried.

    ``answer`` is the replica's own (5xx) answer, given to the client if no replica does better.
    """

    def __init__(self, reason: str, answer: web.Response | None = None) -> None:
        super().__init__(reason)
        self.answer = answer


class Busy(Failed):
    """The replica did not take the connection in time (a connect timeout): load, not death.
    Another replica is tried, and this one again once every other was: the request waits at the
    proxy (within its own time limit) instead of failing a burst."""


@dataclass(slots=True)  # made per request: not frozen (see proxy/__init__.py)
class Exchange:
    """One client request being forwarded: what every attempt sends and reports."""

    request: web.Request
    route_name: str
    model: str | None
    path_qs: str
    body: bytes
    content_type: str
    started: float
    identity: Identity
    decode_budget: int  # what the cost model learns from, with the answer's completion tokens
    run: Run = DEFAULT
    # 5xx answers (replica, status): the replica's fault only if another replica then serves the
    # request; one that fails everywhere is the request's own (say, its run's adapter), and one
    # run's errors must not open a replica's circuit for the other runs.
    suspects: list[tuple[Replica, int]] | None = None
    stream: StreamLedger | None = None  # a resumable stream's account (``migration``)
    response: web.StreamResponse | None = None  # a resumable stream's, once its head is sent

    def answer(self, response: web.StreamResponse) -> web.StreamResponse:
        """The client's response to a resumable stream, about to be prepared: from here on a
        failure of its replica is a ``Cut``."""
        self.response = response
        return response

    def send_instead(self, body: bytes, path_qs: str) -> None:
        """What the next attempts send (a stream's continuation)."""
        self.body, self.path_qs = body, path_qs

    @property
    def streaming(self) -> bool:
        """The client has the head of a resumable stream: a failure now is a ``Cut``."""
        return self.stream is not None and self.response is not None
