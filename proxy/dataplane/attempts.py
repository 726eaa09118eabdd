"""What an ejection fails over: the answers still due from the ejected replica.

When the pool ejects a replica, whatever the cause (health, a circuit, another request's
transport error), or removes it, the connection pool gives up on it (``ConnectionPool.drop``):
every attempt still waiting on it fails with ``Dropped``, and the forwarder sends the request to
another replica holding its model, within ``--max-attempts``. Re-sends never add load: the
dropped connection closes, which cancels the generation on the replica (a slow replica loses
that request rather than serving it twice). An answer is the client's, and left alone, once
nothing more can go wrong unseen by the client: a whole answer read, or a stream whose client
has bytes (its connection ``settle``d), unless it can be carried on elsewhere (``migration``).
A replica that is only draining keeps its attempts.

Cost: nothing per request (a connection's flag); the pool's changes act on newly ejected or
removed replicas only.
"""

from __future__ import annotations

from proxy.fleet.pool import ReplicaPool
from proxy.fleet.replica import Health
from proxy.upstream.connpool import ConnectionPool

EJECTED = "its replica was ejected while it answered"  # what a dropped attempt says


class Ejections:
    """Follows ``pool`` and has ``connections`` drop each replica as it leaves service."""

    def __init__(self, pool: ReplicaPool, connections: ConnectionPool) -> None:
        self._connections = connections
        self._urls: dict[str, str] = {}  # replicas in service: id -> URL
        self._out: set[str] = set()  # ejected ones, dropped once
        pool.follow(self._changed)

    def _changed(self, pool: ReplicaPool) -> None:
        now: dict[str, str] = {}
        for replica in pool:
            if replica.health is Health.EJECTED:
                if replica.id not in self._out:
                    self._out.add(replica.id)
                    self._connections.drop(replica.url, EJECTED)
            else:
                self._out.discard(replica.id)
                now[replica.id] = replica.url
        for rid, url in self._urls.items():
            if rid not in now and pool.get(rid) is None:
                self._out.discard(rid)
                self._connections.drop(url, "its replica was removed while it answered")
        self._urls = now
