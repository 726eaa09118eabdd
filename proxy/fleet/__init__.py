"""Fleet: the replicas and everything the proxy knows and does about each of them.

Holds ``Replica`` and its id (``replica``: which room writes which of its fields), the pool
(``pool``: membership, health, draining and what replicas report; the one way to eject, drain or
admit; the writers of the rest are named in ``replica``), health probing (``health``: a pure
transition and its loop), outlier detection on requests (``outliers``), reading a replica's models
and server info (``info``), the room's wiring (``wiring``), bringing a replica in step with the
fleet before it takes traffic (``sync``), the fleet views TRL and the status pages read (``views``),
replica discovery from the HF Jobs API or a DNS name (``discovery``; what ``--discover`` names is
parsed in ``proxy.config``), which hosts the admin API may add (``hosts``; host and address tests in
``addresses``, standard library only, as ``replica_entry`` imports them) and the load each replica
reports on its ``/metrics``, scraped off the request path (``load``; its settings are
``proxy.config.LoadSettings``).

Rules: may import the standard library, ``proxy.clock``, ``proxy.config``, ``proxy.upstream`` and
its own modules; never the data plane, the adapters service or the HTTP edge (what it needs of
the adapters is a protocol, ``sync.AdapterWindow``).
"""
