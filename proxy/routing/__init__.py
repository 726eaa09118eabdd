"""Routing: pure policies that choose a replica for a request.

Holds the policy protocol (``policy``: candidates, request facts, ``Decision(replica, reason)``),
the settings union and the factory, the concrete policies (``prefix``, ``least_loaded``,
``round_robin``), the consistent hash ring, the routing keys (block hashing, template learning),
the cost model (``cost``: what a request costs, how loaded each candidate is) and ``peek``, which
reads the facts routing needs from a generation body's raw bytes.

Rules: synchronous and I/O-free; no await, no clock, no aiohttp. May import only the standard
library, xxhash, orjson, pydantic and its own modules (``proxy.routing.*``).
"""
