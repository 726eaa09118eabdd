"""Data plane: moving client traffic to replicas.

Holds the forwarder (``forward``: slot, route, send, failover, streaming copy), the in-flight
limiter with its FIFO queue (``limiter``), the fan-out of ``/pause``, ``/resume`` and
``/reset_prefix_cache`` (``fanout``) reading usage figures from answers (``usage``), and the
room's wiring from the settings (``wiring``: limiter, policy, routing facts, forwarder,
fan-out).

Rules: may import ``proxy.clock``, ``proxy.config``, ``proxy.metrics``, ``proxy.routing``,
``proxy.upstream``, ``proxy.fleet`` and its own modules; never the HTTP edge. Services here
return outcomes or raise; the edge (``proxy.http``) builds every error body.
"""
