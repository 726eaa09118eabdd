"""The proxy's domain errors: what a request can fail on, each class carrying its reason.

Services and the edge raise them; the HTTP edge (``proxy.http.edge``, ``proxy.http.errors``)
turns each into an answer in vLLM's error shape through one table (domain error -> HTTP status,
whether the connection closes, ``Retry-After``), counting ``reason``
(``rollout_proxy_rejections_total{reason}``, one of ``proxy.metrics.labels.REJECTION_REASONS``)
and echoing ``param``, the request field at fault. Nothing here knows HTTP: ``status`` is a
status some other server answered (a replica's refusal the error reports), not one it chooses.
"""

from __future__ import annotations

from typing import Any


class DomainError(Exception):
    """A request the proxy cannot carry out as sent (the message says why, in one line)."""

    reason: str | None = None  # the rejections metric's label (None: the table names it)
    param: str | None = None  # the request field at fault (vLLM's ``error.param``)
    status: int | None = None  # the status it echoes, where the table says so (a replica's)
    details: dict[str, Any] | None = None  # what the answer adds beside ``error`` (per replica)
