"""Control routes of the simulation itself, under ``/sim/`` (never in vLLM): faults and the
request records tests read."""

from __future__ import annotations

from aiohttp import web
from pydantic import ValidationError

from replica_entry.sim.errors import ApiError, from_validation, json_response, parse_json
from replica_entry.sim.state import SIM_STATE

routes = web.RouteTableDef()


@routes.get("/sim/faults")
async def get_faults(request: web.Request) -> web.Response:
    return json_response(request.app[SIM_STATE].faults.model_dump())


@routes.post("/sim/faults")
async def set_faults(request: web.Request) -> web.Response:
    """Merge a JSON object into the current faults; 400 naming the field if the result is
    invalid (the faults stay as they were)."""
    state = request.app[SIM_STATE]
    patch = parse_json(await request.read())
    if not isinstance(patch, dict):
        raise ApiError("Faults must be a JSON object.", param="body")
    try:
        state.faults = state.faults.merged(patch)
    except ValidationError as exc:
        raise from_validation(exc) from None
    return json_response(state.faults.model_dump())


@routes.get("/sim/requests")
async def get_requests(request: web.Request) -> web.Response:
    state = request.app[SIM_STATE]
    return json_response({"records": state.records.as_json(), "counters": state.counters()})


@routes.post("/sim/requests/clear")
async def clear_requests(request: web.Request) -> web.Response:
    """Forget the records and counters; the in-flight peak restarts from the current load."""
    state = request.app[SIM_STATE]
    state.records.clear()
    state.engine.max_in_flight = state.engine.in_flight
    return json_response({"counters": state.counters()})
