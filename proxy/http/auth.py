"""Inbound authentication: ``Authorization: Bearer KEY``, compared in constant time."""

from __future__ import annotations

import hmac

from aiohttp import web
from pydantic import SecretStr

from proxy.http.responses import error_response


class KeyCheck:
    """Checks one configured key; with no key configured every request passes."""

    def __init__(self, key: SecretStr | None, realm: str) -> None:
        self._expected = f"Bearer {key.get_secret_value()}".encode() if key is not None else None
        self._realm = realm

    @property
    def enabled(self) -> bool:
        return self._expected is not None

    def allows(self, request: web.Request) -> bool:
        if self._expected is None:
            return True
        given = request.headers.get("Authorization", "").encode("utf-8", "surrogateescape")
        return hmac.compare_digest(given, self._expected)

    def refusal(self) -> web.Response:
        return error_response(
            401,
            f"missing or wrong {self._realm} key: send 'Authorization: Bearer <key>'",
            headers={"WWW-Authenticate": "Bearer"},
        )
