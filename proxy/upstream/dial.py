"""Where a replica URL's requests go (``Origin``), and opening a connection there (``dial``):
the one place where the resolver's, the socket's and TLS's errors enter the proxy.

``dial`` maps every way a connect fails into ``proxy.upstream.errors``' tree once, after
httpcore's ``map_exceptions``, each with the words a user can act on as its ``summary``
(checked in this order: a certificate error is a TLS error is an OSError)::

    the connect limit passed             ConnectTimeout      (``reasons``: timed out after N s)
    socket.gaierror (the name lookup)    ConnectError        DNS name not found (host)
    ssl.SSLCertVerificationError         ConnectError        TLS certificate not accepted (why)
    ssl.SSLError (the handshake)         ConnectError        TLS handshake failed (detail)
    OSError EMFILE, ENFILE, ENOBUFS,     LocalResourceError  the proxy cannot open a
      ENOMEM (the proxy's own limits)                        connection: strerror
    OSError ECONNREFUSED, ECONNRESET,    ConnectError        connection refused, connection
      EHOSTUNREACH, ENETUNREACH                              reset, host/network unreachable
    any other OSError                    ConnectError        its strerror (or its message)

The original is not kept as a cause: the tree says all there is to know (``reasons`` reads it,
nothing walks ``__cause__``). Cost: nothing on success but the connect itself; an ``Origin`` is
made once per URL (its pool keeps it).
"""

from __future__ import annotations

import asyncio
import errno
import socket
import ssl
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar
from urllib.parse import urlsplit

from proxy.upstream.errors import ConnectError, ConnectTimeout, LocalResourceError, UpstreamError

USER_AGENT = "rollout-proxy"
# The proxy's own resources ran out (file descriptors, buffers, memory): not a replica's fault.
LOCAL_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})
_ERRNOS = {
    errno.ECONNREFUSED: "connection refused",
    errno.ECONNRESET: "connection reset",
    errno.EHOSTUNREACH: "host unreachable",
    errno.ENETUNREACH: "network unreachable",
}

P = TypeVar("P", bound=asyncio.Protocol)


@dataclass(frozen=True, slots=True)
class Origin:
    """Where a replica URL's requests go, and the header lines every request to it carries."""

    key: str
    host: str
    port: int
    tls: ssl.SSLContext | None
    prefix: bytes  # the URL's path, prefixed to request targets
    head: bytes  # Host, User-Agent and extra header lines, each ending in CRLF


def origin_of(url: str, tls: ssl.SSLContext | None, extra: str) -> Origin:
    """``url``'s origin: https:// over TLS with ``tls`` (the default context when None), the
    URL's path without its trailing slash as the prefix of every target; ``extra``: header lines
    each request carries (the upstream token), each ending in CRLF."""
    parts = urlsplit(url)  # validated once where it entered (config.check_replica_url)
    https = parts.scheme == "https"
    host_header = parts.netloc.rpartition("@")[2]
    head = f"Host: {host_header}\r\nUser-Agent: {USER_AGENT}\r\n{extra}"
    return Origin(
        key=f"{parts.scheme}://{host_header}",
        host=parts.hostname or "",
        port=parts.port or (443 if https else 80),
        tls=(tls or ssl.create_default_context()) if https else None,
        prefix=parts.path.rstrip("/").encode("latin-1"),
        head=head.encode("latin-1"),
    )


async def dial(origin: Origin, factory: Callable[[], P], timeout_s: float) -> P:
    """A connection to ``origin`` within ``timeout_s`` (TCP, then TLS for https://): the protocol
    ``factory`` made for it. Raises only the tree (see the module docstring)."""
    loop = asyncio.get_running_loop()
    try:
        async with asyncio.timeout(timeout_s):
            transport, protocol = await loop.create_connection(
                factory,
                origin.host,
                origin.port,
                ssl=origin.tls,
                server_hostname=origin.host if origin.tls is not None else None,
            )
    except TimeoutError:
        raise ConnectTimeout(f"no connection to {origin.key} within {timeout_s:g} s") from None
    except OSError as exc:
        raise connect_error(origin, exc) from None
    protocol.connection_made(transport)  # uvloop may call it only after this returns
    return protocol


def connect_error(origin: Origin, exc: OSError) -> UpstreamError:
    """What a failed connect to ``origin`` means, in the tree (the table above)."""
    if isinstance(exc, socket.gaierror):
        summary = f"DNS name not found ({origin.host})"
    elif isinstance(exc, ssl.SSLCertVerificationError):
        summary = f"TLS certificate not accepted ({exc.verify_message or exc})"
    elif isinstance(exc, ssl.SSLError):
        summary = f"TLS handshake failed ({exc})"
    elif exc.errno in LOCAL_ERRNOS:
        why = exc.strerror or str(exc)
        return LocalResourceError(f"the proxy cannot open a connection: {why}")
    else:
        summary = _ERRNOS.get(exc.errno or 0) or exc.strerror or str(exc) or type(exc).__name__
    return ConnectError(f"cannot connect to {origin.key}: {summary}", summary)
