"""Request identity: ``X-Request-ID`` and W3C ``traceparent``, end to end.

A client's ``X-Request-ID`` is kept and returned unchanged (printable ASCII, at most
``MAX_ID_LENGTH`` characters, else the request is refused 400); a request without one gets an id
made here (a per-process random prefix and a counter: unique, cheap, sortable within a process).
The id, and a well-formed ``traceparent`` when the client sent one, go upstream with the request,
so a replica's log lines can be matched to the proxy's; the id comes back on every answer and in
the access log line (``--access-log``).
"""

from __future__ import annotations

import os
import re

from aiohttp import web

from proxy.dataplane.exchange import Identity

REQUEST_ID = "X-Request-ID"
TRACEPARENT = "traceparent"
MAX_ID_LENGTH = 200
_TRACEPARENT = re.compile(r"[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}")
IDENTITY = web.RequestKey("identity", Identity)


class Identities:
    def __init__(self) -> None:
        self._prefix = os.urandom(4).hex()
        self._count = 0

    def of(self, request: web.Request) -> Identity | None:
        """The request's identity; None when its ``X-Request-ID`` cannot be passed on as is."""
        headers = request.headers
        given = headers.get(REQUEST_ID)
        if given is None:
            self._count += 1
            rid = f"{self._prefix}-{self._count:x}"
        elif len(given) <= MAX_ID_LENGTH and given.isascii() and given.isprintable() and given:
            rid = given
        else:
            return None
        lines = f"{REQUEST_ID}: {rid}\r\n"
        parent = headers.get(TRACEPARENT)
        if parent is not None and _TRACEPARENT.fullmatch(parent):
            lines += f"{TRACEPARENT}: {parent}\r\n"
        return Identity(rid, lines.encode("ascii"))
