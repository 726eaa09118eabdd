"""``build_sim_app``: the simulated vLLM replica as an aiohttp application."""

from __future__ import annotations

import time
from collections.abc import Callable

from aiohttp import web

from replica_entry.sim import (
    routes_control,
    routes_generate,
    routes_receiver,
    routes_sim,
    routes_tokens,
)
from replica_entry.sim.middleware import check_api_key, record_requests, render_errors
from replica_entry.sim.settings import SimSettings
from replica_entry.sim.state import SIM_STATE, SimState


def build_sim_app(
    settings: SimSettings, *, clock: Callable[[], float] = time.time
) -> web.Application:
    """A replica answering vLLM's HTTP contract; its state is at ``app[SIM_STATE]``.

    ``clock`` is the wall clock the adapter mount lag is measured on (file times are wall
    times); tests pass a fake one.
    """
    app = web.Application(
        middlewares=[record_requests, check_api_key, render_errors],
        client_max_size=64 * 1024 * 1024,
    )
    app[SIM_STATE] = SimState(settings, clock)
    app.add_routes(routes_control.routes)
    app.add_routes(routes_generate.routes)
    app.add_routes(routes_tokens.routes)
    app.add_routes(routes_sim.routes)
    app.add_routes(routes_receiver.routes)
    app.on_startup.append(_start_receiver)
    app.on_cleanup.append(_stop_receiver)
    return app


async def _start_receiver(app: web.Application) -> None:
    """The receiver's store is emptied when the replica starts."""
    _ = app[SIM_STATE].receiver


async def _stop_receiver(app: web.Application) -> None:
    app[SIM_STATE].close()
