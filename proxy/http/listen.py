"""The proxy's listening socket: made (``listening_socket``, a supervisor's to hand down) or
refused in one line naming the address and what to do (``CannotListen``: a start-up error a
restart cannot fix)."""

from __future__ import annotations

import errno
import socket

BACKLOG = 4096  # the listening socket's accept queue

# Why a listening socket could not be made, in words, with what to do (``CannotListen``);
# ``{server}``: what else may be running there (the proxy, a replica).
_BIND_ERRORS = {
    errno.EADDRINUSE: "address already in use (another {server} running? pick another --port)",
    errno.EACCES: "permission denied (ports below 1024 need privileges: pick another --port)",
    errno.EADDRNOTAVAIL: "address not available (--host must be an address of this machine)",
}


class CannotListen(Exception):
    """The proxy's port could not be opened: a start-up error a restart cannot fix."""


def cannot_listen(host: str, port: int, exc: OSError, server: str = "proxy") -> CannotListen:
    """``exc`` from ``create_server`` as one line naming the address and what to do
    (``server``: what kind of server the user may have left running on that port)."""
    if isinstance(exc, socket.gaierror):
        why = f"--host {host} does not resolve ({exc.strerror})"
    else:
        why = _BIND_ERRORS.get(exc.errno or 0, exc.strerror or str(exc)).format(server=server)
    return CannotListen(f"cannot listen on {host}:{port}: {why}")


def listening_socket(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host:port`` (``BACKLOG``), for a supervisor to hand down to
    each proxy it starts (``serving``'s ``sock``); ``CannotListen`` when it cannot be opened."""
    try:
        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
        return socket.create_server((host, port), family=family, backlog=BACKLOG)
    except OSError as exc:  # the port cannot be had: one line saying why, nothing started
        raise cannot_listen(host, port, exc) from None
