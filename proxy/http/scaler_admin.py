"""The admin API's scaler route: ``POST /admin/scaler`` takes the run's scaler's report of its
last decision (``deploy.scaler.report``; the admin key checked by ``Admin.guard``, as for the
other admin routes), keeps it for ``/proxy/status`` (``scaler``) and counts the decision by
action (``rollout_proxy_scaler_decisions_total``). 200 with what was kept; a body that is not a
report is a ``BadAdminBody`` (400) naming the field.
"""

from __future__ import annotations

import logging

from aiohttp import web
from aiohttp.typedefs import Handler

from proxy.clock import Clock
from proxy.http.bodies import BodyReader, admin_body_fault
from proxy.http.responses import json_response
from proxy.insight.scaler import ScalerReports
from proxy.metrics.recorder import Metrics

log = logging.getLogger("proxy.admin")
REPORT_SHAPE = (
    'cannot take the scaler\'s report: the body must be {"action": "add|retire|hold", '
    '"replicas": {"wanted": N, "ready": N, "starting": N, "draining": N}, "reason": "..."}'
)


class ScalerAdmin:
    def __init__(
        self, reports: ScalerReports, metrics: Metrics, bodies: BodyReader, clock: Clock
    ) -> None:
        self.reports, self.metrics, self.bodies, self.clock = reports, metrics, bodies, clock

    def routes_table(self) -> list[tuple[str, str, Handler]]:
        return [("POST", "/admin/scaler", self.report)]

    async def report(self, request: web.Request) -> web.StreamResponse:
        body = await self.bodies.json_object(request, REPORT_SHAPE)
        with admin_body_fault("cannot take the scaler's report"):
            action = self.reports.take(body, self.clock.monotonic())
        self.metrics.record_scaler_decision(action)
        if action != "hold":
            log.info("scaler: %s: %s", action, self.reports.last and self.reports.last["reason"])
        return json_response(200, self.reports.page(self.clock.monotonic()))
