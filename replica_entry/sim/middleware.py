"""The replica's middlewares, outermost first: request records, API-key check, error bodies.

- Records: every request but the ``/sim/`` control routes gets a ``RequestRecord``; a client
  that leaves mid-request is recorded as ``cancelled``. A cancelled handler task is re-raised;
  a connection reset is answered with a response that can no longer reach anyone, because
  re-raising it would only make aiohttp log a traceback for an ordinary client departure.
- Auth: with an API key, routes under ``/v1`` need ``Authorization: Bearer <key>`` and answer
  vLLM's bare ``{"error": "Unauthorized"}`` 401 otherwise; everything else stays open.
- Errors: ``ApiError`` becomes vLLM's error JSON; unknown routes answer FastAPI's
  ``{"detail": "Not Found"}``.
"""

from __future__ import annotations

import asyncio
import secrets

from aiohttp import web
from aiohttp.typedefs import Handler

from replica_entry.sim.errors import ApiError, json_response
from replica_entry.sim.records import RequestRecord
from replica_entry.sim.state import SIM_STATE

RECORD = web.RequestKey("sim_record", RequestRecord)
SIM_PREFIX = "/sim/"
GUARDED_PREFIX = "/v1"


def authorization_matches(request: web.Request, api_key: str) -> bool:
    scheme, _, token = request.headers.get("Authorization", "").partition(" ")
    return scheme.lower() == "bearer" and secrets.compare_digest(token.encode(), api_key.encode())


def client_gone(request: web.Request) -> bool:
    """Whether the client of ``request`` has disconnected."""
    transport = request.transport
    return transport is None or transport.is_closing()


@web.middleware
async def record_requests(request: web.Request, handler: Handler) -> web.StreamResponse:
    if request.path.startswith(SIM_PREFIX):
        return await handler(request)
    state = request.app[SIM_STATE]
    key = state.settings.api_key
    record = state.records.open(
        request.method,
        request.path,
        request.query_string,
        None if key is None else authorization_matches(request, key),
        request.headers.get("x-routing-key"),
    )
    request[RECORD] = record
    try:
        response = await handler(request)
    except web.HTTPException as exc:
        record.status = exc.status
        raise
    except asyncio.CancelledError:
        state.records.mark_cancelled(record)
        raise
    except ConnectionResetError:
        state.records.mark_cancelled(record)
        return web.Response(status=499)
    record.status = response.status
    return response


@web.middleware
async def check_api_key(request: web.Request, handler: Handler) -> web.StreamResponse:
    key = request.app[SIM_STATE].settings.api_key
    if key is None or not request.path.startswith(GUARDED_PREFIX):
        return await handler(request)
    if authorization_matches(request, key):
        return await handler(request)
    return json_response({"error": "Unauthorized"}, status=401)


@web.middleware
async def render_errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except ApiError as exc:
        return exc.response()
    except web.HTTPNotFound:
        return json_response({"detail": "Not Found"}, status=404)
    except web.HTTPMethodNotAllowed:
        return json_response({"detail": "Method Not Allowed"}, status=405)
