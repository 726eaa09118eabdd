"""The proxy's domain errors: what a request can fail on, each class carrying its reason.

Services raise them; the HTTP edge (``proxy.http.edge``, ``proxy.http.errors``) turns each into an
answer in vLLM's error shape through one table (domain error -> HTTP status), counting
``reason`` (``rollout_proxy_rejections_total{reason}``; None: not a rejection) and echoing
``param``, the request field at fault. Nothing here knows HTTP.
"""

from __future__ import annotations


class DomainError(Exception):
    """A request the proxy cannot carry out as sent (the message says why, in one line)."""

    reason: str | None = None  # the rejections metric's label
    param: str | None = None  # the request field at fault (vLLM's ``error.param``)
