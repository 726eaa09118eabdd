"""Adapters: keeping every replica on the policy versions TRL asks for.

Spec and status, as Kubernetes controllers keep them: the registry (``registry``: the versions
wanted, pure, commands as data) inside the fleet's spec (``spec``: with the plan's one ordering
rule, each load's deadline and pushes); one agent per replica (``agent``, ``agents``) that
observes its replica, acts on the difference and writes only that replica's status (``status``);
the fleet loads under way (``loads``: one intent per name, ``intent``, settled from the
statuses); the service behind TRL's load and unload calls and the source's findings
(``service``, taking the typed requests of ``calls``). Carrying one command out (``carry``),
failed commands' retries (``retries``), pushing a version's bytes into replicas' receivers
(``push``), where a version's bytes come from (``origin``, ``mirror``), the sources of versions
and the loop that polls them (``sources``, ``watcher``), the window across restarts (``state``),
the served-policy check (``attest``), and the room's wiring from ``proxy.config``'s
``AdapterSettings`` (``wiring``). The receiver these push into (upload format, store, consumer)
lives below the proxy, in ``adapter_receiver``.

Rules: no aiohttp import anywhere here (the edge turns outcomes into answers). The modules may
import the standard library, orjson, huggingface_hub (bucket source), ``adapter_receiver``,
``proxy.clock``, ``proxy.config`` (the wiring reads the settings),
``proxy.metrics``, ``proxy.upstream``, ``proxy.fleet`` and its own modules.
"""
