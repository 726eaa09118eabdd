"""The admin API: add, drain, undrain and remove replicas at run time.

Guarded by the admin key (``Authorization: Bearer <admin key>``); without one configured the API
answers 403 (``AdminDisabled``) and does nothing. A replica added gets the upstream token, so
only hosts of the allowlist (``proxy.fleet.hosts``, ``--replica-hosts``) may be added (403,
``HostNotAllowed``). Added replicas start PENDING and take traffic once the health loop has
probed and synced them. Bodies are read as every body is (``proxy.http.bodies``: its limit,
timeout and budget); refusals are domain errors, answered by the edge's table.
"""

from __future__ import annotations

import logging

from aiohttp import web
from aiohttp.typedefs import Handler

from proxy.config import check_replica_url
from proxy.fleet import views
from proxy.fleet.hosts import HostAllowlist
from proxy.fleet.pool import ReplicaPool
from proxy.fleet.replica import Replica
from proxy.http.auth import KeyCheck
from proxy.http.bodies import BadAdminBody, BodyReader, admin_body_fault
from proxy.http.refusals import AdminDisabled, HostNotAllowed, UnknownReplica
from proxy.http.responses import json_response

log = logging.getLogger("proxy.admin")
ADD_SHAPE = 'cannot add replica: the body must be {"url": "http://host:port"}'


class Admin:
    def __init__(
        self, pool: ReplicaPool, key: KeyCheck, hosts: HostAllowlist, bodies: BodyReader
    ) -> None:
        self._pool = pool
        self._key = key
        self._hosts = hosts
        self._bodies = bodies

    def guard(self, handler: Handler) -> Handler:
        async def run(request: web.Request) -> web.StreamResponse:
            if not self._key.enabled:
                raise AdminDisabled
            self._key.check(request)
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
        url = (await self._bodies.json_object(request, ADD_SHAPE)).get("url")
        if not isinstance(url, str):
            raise BadAdminBody(ADD_SHAPE)
        with admin_body_fault("cannot add replica"):
            check_replica_url(url)
        if not self._hosts.allows(url):
            raise HostNotAllowed(self._hosts.patterns)
        with admin_body_fault("cannot add replica"):  # an id the pool has already
            replica = self._pool.add(url)
        log.info("admin: replica %s added", replica.id)
        return json_response(201, views.replica_status(replica))

    def _find(self, request: web.Request) -> Replica:
        replica = self._pool.get(request.match_info["rid"])
        if replica is None:
            raise UnknownReplica(request.match_info["rid"])
        return replica

    async def drain(self, request: web.Request) -> web.StreamResponse:
        return self._set_draining(request, True)

    async def undrain(self, request: web.Request) -> web.StreamResponse:
        return self._set_draining(request, False)

    def _set_draining(self, request: web.Request, draining: bool) -> web.StreamResponse:
        replica = self._find(request)
        self._pool.drain(replica, draining)
        log.info("admin: replica %s %s", replica.id, "draining" if draining else "undrained")
        return json_response(200, views.replica_status(replica))

    async def remove(self, request: web.Request) -> web.StreamResponse:
        replica = self._find(request)
        self._pool.remove(replica.id)
        log.info(
            "admin: replica %s removed (%d request(s) still finishing)",
            replica.id,
            replica.inflight,
        )
        return json_response(200, views.replica_status(replica))
