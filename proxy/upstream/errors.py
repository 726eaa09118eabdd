"""What can go wrong talking to a replica, as exception types.

Generation path (``connection``/``connpool``): ``WireError`` and its kinds. Control plane
(``client``): aiohttp's transport errors, and ``ReplyError`` for an answer that arrived but cannot
be used (a status the caller cannot work with, a body that is not the JSON it needs).
``RuntimeError`` and other programming errors are deliberately not in any of these sets.
"""

from __future__ import annotations

import errno

import aiohttp

# The proxy's own resources ran out (file descriptors, buffers, memory): not a replica's fault.
LOCAL_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})


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


class LocalResourceError(Exception):
    """The proxy could not open a connection for lack of its own resources (EMFILE, ...)."""


def is_local(exc: BaseException) -> bool:
    """True when ``exc`` (or what caused it) is the proxy running out of its own resources."""
    seen: BaseException | None = exc
    for _ in range(8):  # a short cause chain; bounded against cycles
        if seen is None:
            return False
        if isinstance(seen, LocalResourceError):
            return True
        os_error = getattr(seen, "os_error", None)  # aiohttp.ClientConnectorError
        if isinstance(seen, OSError) and seen.errno in LOCAL_ERRNOS:
            return True
        if isinstance(os_error, OSError) and os_error.errno in LOCAL_ERRNOS:
            return True
        seen = seen.__cause__ or seen.__context__
    return False


class ReplyError(Exception):
    """A control-plane answer that arrived but is not what the caller needs."""


# A control-plane call could not be made or its connection dropped.
TRANSPORT_ERRORS: tuple[type[BaseException], ...] = (
    aiohttp.ClientConnectionError,
    aiohttp.ClientPayloadError,
    TimeoutError,
)
# Everything a control-plane exchange (call + reading its answer) may raise about the replica.
CONTROL_ERRORS: tuple[type[BaseException], ...] = (*TRANSPORT_ERRORS, ReplyError)
# ... and an answer aiohttp could not parse (a malformed status line or header), for callers
# that must survive any replica (the adapter push and its probe).
EXCHANGE_ERRORS: tuple[type[BaseException], ...] = (*CONTROL_ERRORS, aiohttp.ClientResponseError)
