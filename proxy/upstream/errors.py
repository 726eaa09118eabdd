"""What can go wrong talking to a replica: one small tree, and one place that says whose fault.

Both clients raise only this tree: the hot path's own connections (``connection``, ``connpool``)
raise it where they fail, and the control-plane client (``client``) maps aiohttp's errors into
it where they enter (``mapped``, after httpcore's ``map_exceptions``), keeping the original as
the cause (``reasons.failure_reason`` reads its detail: the errno, the certificate, the name)::

    UpstreamError                  this exchange with a replica failed
    ├── WireError                  the replica could not be reached, or dropped or garbled it
    │   ├── ConnectError           no connection could be opened
    │   │   └── ConnectTimeout     opening one took longer than the connect timeout
    │   ├── Disconnected           closed or reset before the answer was complete
    │   └── BadAnswer              bytes that are not an HTTP/1.x answer this client accepts
    ├── AnswerTimeout              the answer did not arrive within the call's time limit
    ├── ReplyError                 an answer arrived, but not one the caller can use
    └── LocalResourceError         the proxy's own resources ran out (EMFILE, ENOBUFS, ...)

``blame`` decides what an error means for the replica, for every caller alike: the proxy's own
limit is never the replica's fault (never eject), a slow answer is counted but says nothing of
its health, an unusable answer came from a live replica, and a wire failure means it is gone.
``RuntimeError`` and other programming errors are deliberately not in the tree.
"""

from __future__ import annotations

import enum
import errno

from proxy.errors import DomainError

# The proxy's own resources ran out (file descriptors, buffers, memory): not a replica's fault.
LOCAL_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})


class UpstreamError(Exception):
    """An exchange with a replica failed (the subclass says how)."""


class WireError(UpstreamError):
    """The replica could not be reached, or dropped or garbled the answer."""


class ConnectError(WireError):
    """No connection could be opened."""


class ConnectTimeout(ConnectError):
    """Opening the connection took longer than the connect timeout."""


class Disconnected(WireError):
    """The connection closed or reset before the answer was complete."""


class Dropped(WireError):
    """The proxy gave up on the replica (ejected or removed) while the answer was still due."""


class BadAnswer(WireError):
    """The replica's bytes are not an HTTP/1.x answer this client accepts."""


class AnswerTimeout(UpstreamError, TimeoutError):
    """The answer did not arrive within the call's time limit (a ``TimeoutError`` too)."""


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


def local_errno(exc: BaseException | None) -> bool:
    """True when ``exc`` is an OS error of the proxy's own resources."""
    return isinstance(exc, OSError) and exc.errno in LOCAL_ERRNOS
