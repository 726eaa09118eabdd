"""The adapter receiver's routes on the simulated replica: the same ``adapter_receiver.receive``
core that ``replica_entry.receiver`` puts inside vLLM, behind aiohttp. Like there, the routes
check the replica's API key themselves (vLLM's own check covers ``/v1`` only), and a stored copy
goes when its name is unloaded (``routes_control``)."""

from __future__ import annotations

from collections.abc import AsyncIterator

from aiohttp import ClientPayloadError, web

from adapter_receiver.receive import Answer, ClientGone, authorized
from adapter_receiver.wire import PREFIX
from replica_entry.sim.errors import json_response
from replica_entry.sim.state import SIM_STATE

routes = web.RouteTableDef()


@routes.get(PREFIX)
async def listing(request: web.Request) -> web.Response:
    state = request.app[SIM_STATE]
    receiver = state.receiver
    if receiver is None:
        return _not_found()
    if not authorized(request.headers.get("Authorization"), state.settings.api_key):
        return _unauthorized()
    return _answer(await receiver.listing())


@routes.put(PREFIX + "/{name}")
async def upload(request: web.Request) -> web.Response:
    state = request.app[SIM_STATE]
    receiver = state.receiver
    if receiver is None:
        return _not_found()
    if not authorized(request.headers.get("Authorization"), state.settings.api_key):
        return _unauthorized()
    name = request.match_info["name"]
    return _answer(await receiver.upload(name, request.content_length, _chunks(request)))


async def _chunks(request: web.Request) -> AsyncIterator[bytes]:
    try:
        async for chunk in request.content.iter_any():
            yield chunk
    except (ClientPayloadError, ConnectionError) as exc:
        raise ClientGone from exc


def _answer(answer: Answer) -> web.Response:
    return json_response(answer.body, status=answer.status)


def _not_found() -> web.Response:
    return json_response({"detail": "Not Found"}, status=404)


def _unauthorized() -> web.Response:
    return json_response({"error": "Unauthorized"}, status=401)
