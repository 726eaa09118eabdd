"""HF's check of a bearer token, as its jobs proxy and the Hub API answer it: a stand-in server's
guard (``require_bearer``) and the comparison both the guard and the Jobs API stand-in use."""

from __future__ import annotations

import secrets
from collections.abc import Awaitable, Callable

from aiohttp import web

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def require_bearer(app: web.Application, token: str) -> web.Application:
    """Put HF's jobs-proxy check in front of ``app``: ``Authorization: Bearer <token>`` or 401."""

    @web.middleware
    async def guard(request: web.Request, handler: Handler) -> web.StreamResponse:
        if not bearer_matches(request, token):
            return refused()
        return await handler(request)

    app.middlewares.insert(0, guard)
    return app


def bearer_matches(request: web.Request, token: str) -> bool:
    scheme, _, given = request.headers.get("Authorization", "").partition(" ")
    return scheme.lower() == "bearer" and secrets.compare_digest(given.encode(), token.encode())


def refused() -> web.Response:
    """HF's answer to a missing or wrong token."""
    return web.json_response({"error": "Invalid credentials in Authorization header"}, status=401)
