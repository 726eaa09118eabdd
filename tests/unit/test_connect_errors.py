"""The connect path's table (``dial.connect_error``) without sockets: each way a connect fails
becomes one error of the tree, with the words a user can act on as its summary."""

from __future__ import annotations

import errno
import socket
import ssl

import pytest

from proxy.upstream.dial import connect_error, origin_of
from proxy.upstream.errors import Blame, ConnectError, LocalResourceError, blame
from proxy.upstream.reasons import failure_reason

ORIGIN = origin_of("http://replica-1.internal:8000/base/", None, "")


def _cert_error() -> ssl.SSLCertVerificationError:
    exc = ssl.SSLCertVerificationError(1, "[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify")
    exc.verify_message = "certificate has expired"
    return exc


@pytest.mark.parametrize(
    ("raised", "summary"),
    [
        (ConnectionRefusedError(errno.ECONNREFUSED, "Connect call failed"), "connection refused"),
        (ConnectionResetError(errno.ECONNRESET, "reset by peer"), "connection reset"),
        (OSError(errno.EHOSTUNREACH, "No route to host"), "host unreachable"),
        (OSError(errno.ENETUNREACH, "Network is unreachable"), "network unreachable"),
        (OSError(errno.EADDRNOTAVAIL, "Cannot assign requested address"),
         "Cannot assign requested address"),
        (OSError("Multiple exceptions: [Errno 111] a, [Errno 113] b"),
         "Multiple exceptions: [Errno 111] a, [Errno 113] b"),
        (socket.gaierror(socket.EAI_NONAME, "Name or service not known"),
         "DNS name not found (replica-1.internal)"),
        (_cert_error(), "TLS certificate not accepted (certificate has expired)"),
        (ssl.SSLError(1, "[SSL: WRONG_VERSION_NUMBER] wrong version number"),
         "TLS handshake failed ([SSL: WRONG_VERSION_NUMBER] wrong version number)"),
    ],
)  # fmt: skip
def test_a_failed_connect_is_a_connect_error_in_words(raised: OSError, summary: str) -> None:
    exc = connect_error(ORIGIN, raised)
    assert type(exc) is ConnectError and blame(exc) is Blame.GONE
    assert exc.summary == failure_reason(exc, 1.0) == summary
    assert str(exc) == f"cannot connect to http://replica-1.internal:8000: {summary}"


@pytest.mark.parametrize("code", [errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM])
def test_the_proxys_own_limits_are_its_own_never_the_replicas(code: int) -> None:
    exc = connect_error(ORIGIN, OSError(code, "Too many open files"))
    assert type(exc) is LocalResourceError and blame(exc) is Blame.OURS
    assert exc.reason == "local_resources"  # the rejections metric's label, kept
    assert failure_reason(exc, 1.0) == "the proxy cannot open a connection: Too many open files"


def test_an_origin_keeps_the_prefix_and_the_host_as_given() -> None:
    assert (ORIGIN.key, ORIGIN.host, ORIGIN.port) == ("http://replica-1.internal:8000",
                                                     "replica-1.internal", 8000)  # fmt: skip
    assert ORIGIN.prefix == b"/base" and ORIGIN.tls is None
    assert ORIGIN.head.startswith(b"Host: replica-1.internal:8000\r\n")
    tls = origin_of("https://[::1]/", None, "Authorization: Bearer t\r\n")
    assert (tls.host, tls.port, tls.prefix) == ("::1", 443, b"")
    assert tls.tls is not None and tls.head.endswith(b"Authorization: Bearer t\r\n")
