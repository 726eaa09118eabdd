"""HF's check of a bearer token, as its jobs proxy answers it: a stand-in server's guard
(``require_bearer``), with the comparison and the 401 the Hub's Jobs API answers
(``deploy.rehearsal.hub_wire``, shared by the stand-in and the rehearsal's bridge)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from aiohttp import web

from deploy.rehearsal.hub_wire import bearer_matches, refused

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


__all__ = ["bearer_matches", "refused", "require_bearer"]
