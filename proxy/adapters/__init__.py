"""Adapters: keeping every replica on the policy versions TRL asks for.

Holds the registry (``registry``: pure state, commands as data), the sources of versions
(``sources``: a mounted directory or the Hub bucket API) and the loop that polls them
(``watcher``), carrying commands out on replicas with retries, rollback and replay
(``broadcast``), pushing a version's bytes into replicas' receivers (``push``), the service
behind TRL's load and unload calls (``service``) and the room assembled from ``proxy.config``'s
``AdapterSettings`` (``room``). The receiver's core: the upload format (``wire``), the disk store
(``store``) and the upload consumer (``receive``), which the proxy, the simulated replica and
vLLM (``replica_entry.receiver``) host.

Rules: no aiohttp import anywhere here (the edge turns outcomes into answers). ``wire``,
``store`` and ``receive`` import the standard library and each other only (they run inside
vLLM's API server). The rest may import the standard library, orjson, huggingface_hub (bucket
source), ``proxy.clock``, ``proxy.config`` (the room's factory reads the settings),
``proxy.metrics``, ``proxy.upstream``, ``proxy.fleet`` and its own modules.
"""
