"""Adapters: keeping every replica on the policy versions TRL asks for.

Holds the registry (``registry``: pure state, commands as data), the sources of versions
(``sources``: a mounted directory or the Hub bucket API) and the loop that polls them
(``watcher``), carrying commands out on replicas with retries, rollback and replay
(``broadcast``), pushing a version's bytes into replicas' receivers (``push``), the service
behind TRL's load and unload calls (``service``) and the room assembled from ``proxy.config``'s
``AdapterSettings`` (``room``). The receiver these push into (upload format, store, consumer)
lives below the proxy, in ``adapter_receiver``.

Rules: no aiohttp import anywhere here (the edge turns outcomes into answers). The modules may
import the standard library, orjson, huggingface_hub (bucket source), ``adapter_receiver``,
``proxy.clock``, ``proxy.config`` (the room's factory reads the settings),
``proxy.metrics``, ``proxy.upstream``, ``proxy.fleet`` and its own modules.
"""
