"""Why a replica could not be used, in words: the one reason string the log, ``/health``,
``/proxy/status`` and ``top`` all show (``connection refused``, not ``ConnectError``).

Each reason says what a user can check: the name, the certificate, the token, the timeout. The
words are the errors' own (``UpstreamError.summary``, set once where the failure entered:
``dial``, ``connection``); only a deadline is said here, in the caller's terms. Pure: no I/O.
"""

from __future__ import annotations

from proxy.upstream.errors import AnswerTimeout, ConnectTimeout, UpstreamError

_STATUSES = {
    401: "HTTP 401 (check --upstream-token)",
    403: "HTTP 403 (check --upstream-token)",
    404: "HTTP 404 (is the URL a vLLM server's base URL?)",
}


def failure_reason(exc: UpstreamError, timeout_s: float) -> str:
    """What ``exc``, raised by a call with a ``timeout_s`` limit, means for the replica."""
    if isinstance(exc, AnswerTimeout | ConnectTimeout):
        return f"timed out after {timeout_s:g} s"
    return exc.summary


def status_reason(status: int) -> str:
    """An answer's status as a reason: ``HTTP 401 (check --upstream-token)``, ``HTTP 503``."""
    return _STATUSES.get(status, f"HTTP {status}")
