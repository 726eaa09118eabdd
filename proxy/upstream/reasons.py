"""Why a replica could not be used, in words: the one reason string the log, ``/health``,
``/proxy/status`` and ``top`` all show (``connection refused``, not ``ClientConnectorError``).

Each reason says what a user can check: the name, the certificate, the token, the timeout.
Pure: no I/O.
"""

from __future__ import annotations

import errno

import aiohttp

from proxy.upstream.errors import AnswerTimeout, UpstreamError

_ERRNOS = {
    errno.ECONNREFUSED: "connection refused",
    errno.ECONNRESET: "connection reset",
    errno.EHOSTUNREACH: "host unreachable",
    errno.ENETUNREACH: "network unreachable",
}
_STATUSES = {
    401: "HTTP 401 (check --upstream-token)",
    403: "HTTP 403 (check --upstream-token)",
    404: "HTTP 404 (is the URL a vLLM server's base URL?)",
}


def failure_reason(exc: BaseException, timeout_s: float) -> str:
    """What ``exc``, raised by a call with a ``timeout_s`` limit, means for the replica: read in
    the error aiohttp raised when ``exc`` is its mapping (``client.mapped``)."""
    if isinstance(exc, UpstreamError) and exc.__cause__ is not None:
        if isinstance(exc, AnswerTimeout):
            return f"timed out after {timeout_s:g} s"
        return failure_reason(exc.__cause__, timeout_s)
    if isinstance(exc, aiohttp.ClientConnectorCertificateError):
        return f"TLS certificate not accepted ({exc.certificate_error})"
    if isinstance(exc, aiohttp.ClientSSLError):
        return f"TLS handshake failed ({exc.os_error})"
    if isinstance(exc, aiohttp.ClientConnectorDNSError):
        return f"DNS name not found ({exc.host})"
    if isinstance(exc, aiohttp.ClientConnectorError):
        os_error = exc.os_error
        return _ERRNOS.get(os_error.errno or 0, os_error.strerror or type(os_error).__name__)
    if isinstance(exc, TimeoutError):
        return f"timed out after {timeout_s:g} s"
    if isinstance(exc, aiohttp.ServerDisconnectedError):
        return "disconnected before answering"
    if isinstance(exc, aiohttp.ClientPayloadError):
        return "answer cut short"
    if isinstance(exc, UpstreamError) and str(exc):
        return str(exc)
    return type(exc).__name__


def status_reason(status: int) -> str:
    """An answer's status as a reason: ``HTTP 401 (check --upstream-token)``, ``HTTP 503``."""
    return _STATUSES.get(status, f"HTTP {status}")
