"""The admin API: add, drain, undrain and remove replicas at run time.

Guarded by the admin key (``Authorization: Bearer <admin key>``); without one configured the API
answers 403 and does nothing. A replica added gets the upstream token, so only hosts of the
allowlist (``proxy.fleet.hosts``, ``--replica-hosts``) may be added (403 otherwise). Added
replicas start PENDING and take traffic once the health loop has probed and synced them.
"""

from __future__ import annotations

import asyncio
import logging

import orjson
from aiohttp import web
from aiohttp.typedefs import Handler

from proxy.config import check_replica_url
from proxy.fleet import views
from proxy.fleet.hosts import HostAllowlist
from proxy.fleet.pool import ReplicaPool
from proxy.fleet.replica import Replica
from proxy.http.auth import KeyCheck
from proxy.http.responses import body_timeout, error_response, json_response

log = logging.getLogger("proxy.admin")


class Admin:
    def __init__(
        self, pool: ReplicaPool, key: KeyCheck, hosts: HostAllowlist, body_timeout_s: float
    ) -> None:
        self._pool = pool
        self._key = key
        self._hosts = hosts
        self._body_timeout_s = body_timeout_s  # --client-body-timeout, as for every body

    def guard(self, handler: Handler) -> Handler:
        async def run(request: web.Request) -> web.StreamResponse:
            if not self._key.enabled:
                return error_response(
                    403, "the admin API is disabled: start the proxy with --admin-key to enable it"
                )
            if not self._key.allows(request):
                return self._key.refusal()
            return await handler(request)

        return run

    def routes_table(self) -> list[tuple[str, str, Handler]]:
        """(method, path, handler), each to be served behind ``guard``."""
        return [
            ("GET", "/admin/replicas", self.list),
            ("POST", "/admin/replicas", self.add),
            ("POST", "/admin/replicas/{rid}/drain", self.drain),
            ("POST", "/admin/replicas/{rid}/undrain", self.undrain),
            ("DELETE", "/admin/replicas/{rid}", self.remove),
        ]

    async def list(self, request: web.Request) -> web.StreamResponse:
        return json_response(200, [views.replica_status(r) for r in self._pool])

    async def add(self, request: web.Request) -> web.StreamResponse:
        try:
            async with asyncio.timeout(self._body_timeout_s):
                raw = await request.read()
        except TimeoutError:
            return body_timeout(self._body_timeout_s)
        try:
            data = orjson.loads(raw)
        except orjson.JSONDecodeError:
            data = None  # as a body without its url: the same one line saying what to send
        try:
            url = data.get("url") if isinstance(data, dict) else None
            if not isinstance(url, str):
                raise ValueError('the body must be {"url": "http://host:port"}')
            check_replica_url(url)  # a URL that is no replica URL: 400, as before
            if not self._hosts.allows(url):
                allowed = ", ".join(self._hosts.patterns) or "none"
                return error_response(
                    403,
                    f"cannot add replica: its host is not one the proxy sends its upstream "
                    f"token to (allowed: {allowed}); start it with --replica-hosts to allow more",
                )
            replica = self._pool.add(url)
        except (KeyError, ValueError) as exc:
            return error_response(400, f"cannot add replica: {exc}")
        log.info("admin: replica %s added", replica.id)
        return json_response(201, views.replica_status(replica))

    def _find(self, request: web.Request) -> Replica | web.Response:
        replica = self._pool.get(request.match_info["rid"])
        if replica is None:
            return error_response(404, f"no replica with id {request.match_info['rid']!r}")
        return replica

    async def drain(self, request: web.Request) -> web.StreamResponse:
        return self._set_draining(request, True)

    async def undrain(self, request: web.Request) -> web.StreamResponse:
        return self._set_draining(request, False)

    def _set_draining(self, request: web.Request, draining: bool) -> web.StreamResponse:
        replica = self._find(request)
        if isinstance(replica, web.Response):
            return replica
        self._pool.drain(replica, draining)
        log.info("admin: replica %s %s", replica.id, "draining" if draining else "undrained")
        return json_response(200, views.replica_status(replica))

    async def remove(self, request: web.Request) -> web.StreamResponse:
        replica = self._find(request)
        if isinstance(replica, web.Response):
            return replica
        self._pool.remove(replica.id)
        log.info(
            "admin: replica %s removed (%d request(s) still finishing)",
            replica.id,
            replica.inflight,
        )
        return json_response(200, views.replica_status(replica))
