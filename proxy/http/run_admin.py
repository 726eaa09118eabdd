"""The admin API's runs: list, declare (or reweigh) and remove runs while the proxy runs.

Routes (the admin key checked by ``Admin.guard``, as for replicas): ``GET /admin/runs``,
``POST /admin/runs`` with ``{"name": RUN, "weight": W}`` (201 new, 200 reweighed, 400 bad),
``DELETE /admin/runs/{run}`` (200; its paths are 404 at once and its adapters are unloaded on
every replica behind the answer).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import orjson
from aiohttp import web
from aiohttp.typedefs import Handler

from proxy.adapters.service import AdapterService
from proxy.http import responses
from proxy.http.responses import error_response, json_response
from proxy.http.status import Status
from proxy.insight.sampler import Sampler
from proxy.runs.table import Runs, UnknownRun

log = logging.getLogger("proxy.admin")


class RunAdmin:
    """The runs' admin routes; ``status`` reads each run's entry and adapters."""

    def __init__(
        self,
        runs: Runs,
        status: Status,
        sampler: Sampler,
        adapters: AdapterService,
        body_timeout_s: float,
    ) -> None:
        self.runs, self.status, self.sampler, self.adapters = runs, status, sampler, adapters
        self.body_timeout_s = body_timeout_s

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
        try:
            async with asyncio.timeout(self.body_timeout_s):
                raw = await request.read()
        except TimeoutError:
            return responses.body_timeout(self.body_timeout_s)
        try:
            data = orjson.loads(raw)
        except orjson.JSONDecodeError:
            data = None
        shape = 'the body must be {"name": "RUN", "weight": 1}'
        name = data.get("name") if isinstance(data, dict) else None
        weight = data.get("weight", 1) if isinstance(data, dict) else None
        if (
            not isinstance(name, str)
            or isinstance(weight, bool)
            or not isinstance(weight, int | float)
        ):
            return error_response(400, f"cannot declare the run: {shape}")
        new = name not in self.runs
        try:
            self.runs.declare(name, float(weight))
        except ValueError as exc:
            return error_response(400, f"cannot declare the run: {exc}")
        log.info("admin: run %s %s (weight %g)", name, "declared" if new else "reweighted", weight)
        return json_response(201 if new else 200, self.page()[name])

    async def remove(self, request: web.Request) -> web.StreamResponse:
        """The run is gone at once (404 for its paths); its adapters are unloaded behind."""
        name = request.match_info["run"]
        if name not in self.runs:
            return error_response(404, str(UnknownRun(name, (r.name for r in self.runs))))
        view = self.page()[name]
        held = self.status.held(name)
        self.runs.remove(name)
        for scoped_name in held:
            await self.adapters.unload(scoped_name)
        log.info("admin: run %s removed (%d adapter(s) unloading)", name, len(held))
        return json_response(200, view)
