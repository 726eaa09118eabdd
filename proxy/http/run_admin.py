"""The admin API's runs: list, declare (or reweigh) and remove runs while the proxy runs.

Routes (the admin key checked by ``Admin.guard``, as for replicas): ``GET /admin/runs``,
``POST /admin/runs`` with ``{"name": RUN, "weight": W}`` (201 new, 200 reweighed, 400 bad),
``DELETE /admin/runs/{run}`` (200; its paths are 404 at once and its adapters are unloaded on
every replica behind the answer; ``UnknownRun`` for a run no one declared). Bodies are read as
every body is (``proxy.http.bodies``); refusals are domain errors, answered by the edge's table.
"""

from __future__ import annotations

import logging
from typing import Any

from aiohttp import web
from aiohttp.typedefs import Handler

from proxy.adapters.service import AdapterService
from proxy.http.bodies import BadAdminBody, BodyReader, admin_body_fault
from proxy.http.responses import json_response
from proxy.http.status import Status
from proxy.insight.sampler import Sampler
from proxy.runs.table import Runs

log = logging.getLogger("proxy.admin")
DECLARE_SHAPE = 'cannot declare the run: the body must be {"name": "RUN", "weight": 1}'


class RunAdmin:
    """The runs' admin routes; ``status`` reads each run's entry and adapters."""

    def __init__(
        self,
        runs: Runs,
        status: Status,
        sampler: Sampler,
        adapters: AdapterService,
        bodies: BodyReader,
    ) -> None:
        self.runs, self.status, self.sampler, self.adapters = runs, status, sampler, adapters
        self.bodies = bodies

    def page(self) -> dict[str, Any]:
        return self.status.runs_page(self.sampler.run_advice())

    def routes_table(self) -> list[tuple[str, str, Handler]]:
        return [
            ("GET", "/admin/runs", self.list_runs),
            ("POST", "/admin/runs", self.declare),
            ("DELETE", "/admin/runs/{run}", self.remove),
        ]

    async def list_runs(self, request: web.Request) -> web.StreamResponse:
        return json_response(200, self.page())

    async def declare(self, request: web.Request) -> web.StreamResponse:
        """``{"name": NAME, "weight": W}``: a new run (201), or a run's new weight (200)."""
        data = await self.bodies.json_object(request, DECLARE_SHAPE)
        name, weight = data.get("name"), data.get("weight", 1)
        if (
            not isinstance(name, str)
            or isinstance(weight, bool)
            or not isinstance(weight, int | float)
        ):
            raise BadAdminBody(DECLARE_SHAPE)
        new = name not in self.runs
        with admin_body_fault("cannot declare the run"):  # a bad name or weight, too many runs
            self.runs.declare(name, float(weight))
        log.info("admin: run %s %s (weight %g)", name, "declared" if new else "reweighted", weight)
        return json_response(201 if new else 200, self.page()[name])

    async def remove(self, request: web.Request) -> web.StreamResponse:
        """The run is gone at once (404 for its paths); its adapters are unloaded behind."""
        name = request.match_info["run"]
        run = self.runs.get(name)  # UnknownRun: 404
        view = self.page()[name]
        held = self.status.held(run)
        self.runs.remove(name)
        for scoped_name in held:
            await self.adapters.unload(scoped_name)
        log.info("admin: run %s removed (%d adapter(s) unloading)", name, len(held))
        return json_response(200, view)
