"""aiohttp's server logger, with bad client input counted and said once per kind.

A bad request from a client (aiohttp's parse errors) is logged at WARNING once per kind per
``BAD_INPUT_LOG_EVERY_S``, without a traceback, and counted
(``rollout_proxy_bad_client_requests_total{kind}``); our own errors keep their tracebacks.
``ClientErrorLog`` is the ``logger`` aiohttp's handlers are given (``server.runner_options``),
with a ``logging`` filter: only aiohttp's public API is used.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from aiohttp.http_exceptions import (
    BadHttpMessage,
    BadHttpMethod,
    BadStatusLine,
    ContentLengthError,
    HttpProcessingError,
    InvalidHeader,
    InvalidURLError,
    LineTooLong,
    TransferEncodingError,
)

from proxy.logs import redact_tokens

BAD_INPUT_LOG_EVERY_S = 60.0
# Bad client input, by kind (``proxy.metrics.BAD_INPUT_KINDS``, the metric's label values).
_BAD_INPUT: tuple[tuple[type[HttpProcessingError], str], ...] = (
    (LineTooLong, "too_long"),
    (BadHttpMethod, "bad_method"),
    (BadStatusLine, "bad_request_line"),
    (InvalidURLError, "bad_target"),
    (InvalidHeader, "bad_header"),
    (TransferEncodingError, "bad_framing"),
    (ContentLengthError, "bad_framing"),
    (BadHttpMessage, "bad_message"),
)


def bad_input_kind(exc: BaseException) -> str:
    for cls, kind in _BAD_INPUT:
        if isinstance(exc, cls):
            return kind
    return "other"


class ClientErrorLog(logging.Logger):
    """aiohttp's server logger (``AppRunner(logger=...)``): bad client input is a counted
    WARNING once per kind per interval, with no traceback; everything else (our own bugs) is
    logged as usual.

    aiohttp reports a request it could not parse as an ERROR record whose exception is an
    ``HttpProcessingError``; a filter on this logger drops that record and counts (and, once per
    interval, reports) the kind instead. Whichever ``Logger`` method aiohttp calls, the filter
    sees the record."""

    def __init__(self, count: Callable[[str], None], clock: Callable[[], float]) -> None:
        super().__init__("proxy.clients")
        self.parent = logging.getLogger("proxy")
        self._count = count
        self._clock = clock
        self._last: dict[str, float] = {}
        self._suppressed: dict[str, int] = {}
        self.addFilter(self._client_error)

    def _client_error(self, record: logging.LogRecord) -> bool:
        """False (drop the record) for aiohttp's report of a client's bad input."""
        exc = record.exc_info[1] if record.exc_info else None
        if record.levelno < logging.ERROR or not isinstance(exc, HttpProcessingError):
            return True
        self._bad_input(exc)
        return False

    def _bad_input(self, exc: HttpProcessingError) -> None:
        kind = bad_input_kind(exc)
        self._count(kind)
        now = self._clock()
        if now - self._last.get(kind, float("-inf")) < BAD_INPUT_LOG_EVERY_S:
            self._suppressed[kind] = self._suppressed.get(kind, 0) + 1
            return
        self._last[kind] = now
        more = self._suppressed.pop(kind, 0)
        detail = redact_tokens(repr(str(exc.message)[:200]))
        note = f" ({more} more since the last report)" if more else ""
        self.warning("bad request from a client (%s): %s%s", kind, detail, note)
