"""The adapter receiver: how an adapter version's bytes travel into a server that loads them.

The upload format (``wire``), the disk store a receiver keeps its entries in (``store``) and the
upload consumer (``receive``), whatever HTTP server hosts it: vLLM's API server through
``replica_entry.receiver`` (pure ASGI), the simulated replica (``replica_entry.sim``) and the
proxy (``proxy.http.receiver``, where a trainer's relay pushes into a remote proxy). One home
below all three: the proxy pushes in this format (``proxy.adapters.push``) and replicas take it.

Rules: imports the standard library and its own modules only (it runs inside vLLM's API server,
whose process must not import the proxy's dependencies); an import-linter contract checks it.
"""
