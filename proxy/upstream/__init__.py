"""Upstream: how the proxy talks to replicas.

One client for all replica traffic (``client``): a connection pool (``connpool``) of lean
HTTP/1.1 keep-alive connections (``connection``), with a lane for the data path (its bound on
connects under way, and the line of requests waiting for a connection: ``line``) and one for
control calls, over the answer parser (``parser``: pure, bytes in, events out); connections are
opened in one place (``dial``), where the transport's errors enter the one error tree
(``errors``), whose words ``reasons`` shows.

Rules: knows URLs and bytes, not replicas' state. May import the standard library, httptools,
orjson, ``proxy.config``, ``proxy.errors`` and its own modules; nothing else of the proxy, and
not aiohttp (the proxy's one HTTP client is its own: pyproject's import contracts).
"""
