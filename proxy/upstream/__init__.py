"""Upstream: how the proxy talks to replicas.

Holds the HTTP/1.1 answer parser (``parser``: pure, bytes in, events out), the keep-alive
connection that carries generation traffic (``connection``) and its pool (``connpool``), the
control-plane client on an aiohttp session (``client``) and the error types (``errors``).

Rules: knows URLs and bytes, not replicas' state. May import the standard library, aiohttp,
orjson, ``proxy.config`` and its own modules; nothing else of the proxy.
"""
