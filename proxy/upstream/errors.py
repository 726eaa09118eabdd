"""What can go wrong talking to a replica: one small tree, and one place that says whose fault.

Every path to a replica raises only this tree, mapped once where the bytes enter (after httpcore's
``map_exceptions``): ``dial`` turns the socket's, the resolver's and TLS's errors into
``ConnectError``/``ConnectTimeout``/``LocalResourceError``, ``connection`` turns a close, a reset,
a garbled answer or the call's deadline into ``Disconnected``/``BadAnswer``/``AnswerTimeout``.
Each error carries its ``summary``: the failure in the words a user can act on (``connection
refused``, ``DNS name not found (host)``, ``answer cut short``), which ``reasons.failure_reason``
shows as it is; the message may say more (the origin, the detail)::

    UpstreamError                  this exchange with a replica failed
    ├── WireError                  the replica could not be reached, or dropped or garbled it
    │   ├── ConnectError           no connection could be opened
    │   │   └── ConnectTimeout     opening one took longer than the connect limit
    │   ├── Disconnected           closed or reset before the answer was complete
    │   ├── Dropped                the proxy gave up on the replica while an answer was due
    │   └── BadAnswer              bytes that are not an HTTP/1.x answer this client accepts
    │       └── AnswerTooLong      an answer longer than its reader's limit
    ├── AnswerTimeout              the call's deadline passed (the one timeout of the tree)
    ├── ReplyError                 an answer arrived, but not one the caller can use
    └── LocalResourceError         the proxy's own resources ran out (EMFILE, ENOBUFS, ...)

``blame`` decides what an error means for the replica, for every caller alike: the proxy's own
limit is never the replica's fault (never eject), a slow answer is counted but says nothing of
its health, an unusable answer came from a live replica, and a wire failure means it is gone.
``RuntimeError``, ``ValueError`` and other programming errors are deliberately not in the tree.
"""

from __future__ import annotations

import enum

from proxy.errors import DomainError


class UpstreamError(Exception):
    """An exchange with a replica failed (the subclass says how).

    ``summary``: the failure in a few words a user can act on (the message when not given)."""

    def __init__(self, message: str, summary: str | None = None) -> None:
        super().__init__(message)
        self.summary = message if summary is None else summary


class WireError(UpstreamError):
    """The replica could not be reached, or dropped or garbled the answer."""


class ConnectError(WireError):
    """No connection could be opened."""


class ConnectTimeout(ConnectError):
    """Opening the connection took longer than the connect limit."""


class Disconnected(WireError):
    """The connection closed or reset before the answer was complete."""


class Dropped(WireError):
    """The proxy gave up on the replica (ejected or removed) while the answer was still due."""


class BadAnswer(WireError):
    """The replica's bytes are not an HTTP/1.x answer this client accepts."""


class AnswerTooLong(BadAnswer):
    """An answer longer than its reader's limit (a control call's, or ``--max-answer-bytes``)."""


class AnswerTimeout(UpstreamError, DomainError, TimeoutError):
    """The call's deadline passed before its answer was complete: the proxy's one timeout name
    (a ``TimeoutError`` too). A client's request that meets it before its first byte is answered
    504 by the edge's table (the forwarder names the replica and the limit)."""

    reason = "upstream_timeout"


class ReplyError(UpstreamError):
    """A control-plane answer that arrived but is not what the caller needs."""


class LocalResourceError(UpstreamError, DomainError):
    """The proxy could not open a connection for lack of its own resources (EMFILE, ...)."""

    reason = "local_resources"


class Blame(enum.Enum):
    OURS = "ours"  # the proxy's own limit: never eject, the replica did nothing wrong
    SLOW = "slow"  # no answer in time: counted; the health probes judge the replica
    ANSWERED = "answered"  # it answered, with something unusable: alive, not ejected for it
    GONE = "gone"  # unreachable, dropped or garbled: eject (the health loop readmits it)


def blame(exc: UpstreamError) -> Blame:
    """Whose fault ``exc`` is, and so what the caller does about the replica."""
    if isinstance(exc, LocalResourceError):
        return Blame.OURS
    if isinstance(exc, AnswerTimeout):
        return Blame.SLOW
    if isinstance(exc, ReplyError):
        return Blame.ANSWERED
    return Blame.GONE
