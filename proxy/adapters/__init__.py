"""Adapters: keeping every replica on the policy versions TRL asks for.

Holds the registry (``registry``: pure state, commands as data), the sources of versions
(``sources``: a mounted directory or the Hub bucket API) and the loop that polls them
(``watcher``), carrying commands out on replicas with retries, rollback and replay
(``broadcast``) and the service behind TRL's load and unload calls (``service``).

Rules: no aiohttp import anywhere here (the edge turns outcomes into answers). May import the
standard library, orjson, huggingface_hub (bucket source), ``proxy.clock``, ``proxy.metrics``,
``proxy.upstream``, ``proxy.fleet`` and its own modules.
"""
