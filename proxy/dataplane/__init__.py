"""Data plane: moving client traffic to replicas.

Holds the forwarder (``forward``: slot, route, send, failover; ``exchange``: one request being
forwarded; ``attempts``: what an ejection strands), what happens to an answer's bytes
(``answers``: read whole or copied as a stream; its ``usage`` to its owners), a stream that
continues elsewhere when its replica fails (``migration``, ``resumable``, ``ledger``, read on
the bytes by ``sse``, ``scan`` and ``translate``), the in-flight limiter with its FIFO queue and
fair shares (``limiter``, ``fair``), the fan-out of ``/pause``, ``/resume`` and
``/reset_prefix_cache`` (``fanout``), the answer's headers (``headers``), and the room's wiring
from the settings (``wiring``: limiter, policy, routing facts, forwarder, fan-out).

Rules: may import ``proxy.clock``, ``proxy.config``, ``proxy.metrics``, ``proxy.routing``,
``proxy.upstream``, ``proxy.fleet`` and its own modules; never the HTTP edge. Services here
return outcomes or raise; the edge (``proxy.http``) builds every error body.
"""
