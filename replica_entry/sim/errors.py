"""vLLM-shaped error answers.

vLLM's OpenAI server answers errors as
``{"error": {"message": ..., "type": ..., "param": ..., "code": <status>}}``. Handlers raise
``ApiError``; the app's error middleware renders it, so every route shares one shape.
"""

from __future__ import annotations

import re
from http import HTTPStatus
from typing import Any

import orjson
from aiohttp import web
from pydantic import ValidationError

# vLLM's ``err_type`` for the statuses it produces; other statuses (injected faults) fall back
# to the reason phrase.
_ERROR_TYPES = {
    400: "BadRequestError",
    404: "NotFoundError",
    500: "InternalServerError",
}


# vLLM masks file-system paths in error messages (sanitize_message in its exception handling):
# absolute paths under these roots, and any path ending in a file extension.
_PATH = re.compile(
    r"/(?:home|usr|opt|var|tmp|root|lib|mnt|srv)(?:/[^\s'\"]*)?|/[^\s'\"]*\.[A-Za-z0-9]+\b"
)


def sanitize(message: str) -> str:
    return _PATH.sub("<path>", message)


class ApiError(Exception):
    """An error answer: status, message, vLLM error type and the offending parameter."""

    def __init__(
        self,
        message: str,
        *,
        status: int = 400,
        err_type: str | None = None,
        param: str | None = None,
    ) -> None:
        message = sanitize(message)
        super().__init__(message)
        self.message = message
        self.status = status
        self.err_type = err_type or error_type_for(status)
        self.param = param

    def body(self) -> dict[str, Any]:
        return {
            "error": {
                "message": self.message,
                "type": self.err_type,
                "param": self.param,
                "code": self.status,
            }
        }

    def response(self) -> web.Response:
        return json_response(self.body(), status=self.status)


def error_type_for(status: int) -> str:
    """vLLM's error type for ``status``; the HTTP reason phrase for statuses vLLM never uses."""
    if status in _ERROR_TYPES:
        return _ERROR_TYPES[status]
    try:
        return HTTPStatus(status).phrase.replace(" ", "")
    except ValueError:
        return "Error"


def from_validation(exc: ValidationError) -> ApiError:
    """A 400 naming the first bad field, the way vLLM reports pydantic request errors."""
    errors = exc.errors(include_url=False)
    first = errors[0]
    # Union branches show up in ``loc`` as type names ("list[int]"); the field is the first part.
    param = ".".join(str(part) for part in first["loc"][:1]) or None
    label = "error" if len(errors) == 1 else "errors"
    lines = [f"{len(errors)} validation {label}:"]
    lines += [f"  {'.'.join(map(str, e['loc']))}: {e['msg']}" for e in errors[:10]]
    return ApiError("\n".join(lines), param=param)


def json_response(payload: Any, *, status: int = 200) -> web.Response:
    return web.Response(body=orjson.dumps(payload), status=status, content_type="application/json")


def parse_json(body: bytes) -> Any:
    """Decode a request body; invalid JSON is vLLM's 400."""
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise ApiError(f"JSON decode error: {exc}", param="body") from None
