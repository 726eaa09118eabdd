"""What can go wrong talking to a replica, as exception types.

Generation path (``connection``/``connpool``): ``WireError`` and its kinds. Control plane
(``client``): aiohttp's transport errors, and ``ReplyError`` for an answer that arrived but cannot
be used (a status the caller cannot work with, a body that is not the JSON it needs).
``RuntimeError`` and other programming errors are deliberately not in any of these sets.
"""

from __future__ import annotations

import aiohttp


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
