"""Error answers in vLLM's shape, so clients that parse vLLM errors parse ours.

``{"error": {"message", "type", "param", "code"}}``; ``extra`` adds top-level detail (e.g. the
per-replica outcome of a fan-out). Messages must never contain a secret: callers pass text they
built themselves or text scrubbed with ``proxy.logs.redact``.
"""

from __future__ import annotations

from typing import Any

import orjson
from aiohttp import web

_TYPES = {
    400: "BadRequestError",
    401: "AuthenticationError",
    403: "PermissionDeniedError",
    404: "NotFoundError",
    405: "MethodNotAllowed",
    413: "RequestEntityTooLarge",
    502: "BadGateway",
    503: "ServiceUnavailable",
    504: "GatewayTimeout",
}


def error_body(
    status: int, message: str, *, param: str | None = None, extra: dict[str, Any] | None = None
) -> bytes:
    error = {
        "message": message,
        "type": _TYPES.get(status, "Error"),
        "param": param,
        "code": status,
    }
    payload: dict[str, Any] = {"error": error}
    if extra:
        payload.update(extra)
    return orjson.dumps(payload)


def error_response(
    status: int,
    message: str,
    *,
    param: str | None = None,
    extra: dict[str, Any] | None = None,
    headers: dict[str, str] | None = None,
) -> web.Response:
    return web.Response(
        status=status,
        body=error_body(status, message, param=param, extra=extra),
        content_type="application/json",
        headers=headers,
    )


def model_not_found(model: str) -> web.Response:
    """vLLM's own answer for a model the server does not serve."""
    return error_response(404, f"The model `{model}` does not exist.", param="model")
