"""Attesting the served policy: does a replica sample the policy the trainer trained?

``probe`` (the fixed token sequence, a replica's answer to it, the tolerance), ``judge`` (the
comparative evidence without a trainer's reference: pure), ``check`` (the fleet-wide check each
replica's agent asks after a load, and what routing may use), ``verdict`` (the one vocabulary
they speak). Nothing here is on the request path: routing reads what the agents publish.

Rules: the modules may import the standard library, orjson, ``adapter_receiver`` (the probe's
reference format), ``proxy.adapters.registry`` (a version), ``proxy.fleet`` (a replica),
``proxy.upstream`` (the probe's call) and each other; not the adapters' agents, statuses or
service, which import this package (``check.Held`` is what the check reads of a status).
"""
