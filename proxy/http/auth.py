"""Inbound authentication: ``Authorization: Bearer KEY``, compared in constant time; a request
without it is ``Unauthorized`` (401, answered by the error table)."""

from __future__ import annotations

import hmac

from aiohttp import web
from pydantic import SecretStr

from proxy.http.refusals import Unauthorized


class KeyCheck:
    """Checks one configured key; with no key configured every request passes."""

    def __init__(self, key: SecretStr | None, realm: str) -> None:
        self._expected = f"Bearer {key.get_secret_value()}".encode() if key is not None else None
        self._realm = realm

    @property
    def enabled(self) -> bool:
        return self._expected is not None

    def check(self, request: web.Request) -> None:
        """``Unauthorized`` unless ``request`` carries the key (or none is configured)."""
        if self._expected is None:
            return
        given = request.headers.get("Authorization", "").encode("utf-8", "surrogateescape")
        if not hmac.compare_digest(given, self._expected):
            raise Unauthorized(self._realm)
