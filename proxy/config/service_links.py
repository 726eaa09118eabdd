"""Kubernetes' service links: the variables it writes into every pod of a namespace for each
Service there (``enableServiceLinks``, on unless a pod spec turns it off), which a Service named
``proxy`` makes look like the proxy's own ``PROXY_*`` settings.

For a Service NAME (upper-cased, dashes as underscores) with a port 8000/TCP, the kubelet sets
(docker links' shapes, kept for compatibility):

- ``NAME_SERVICE_HOST=10.0.0.11``, ``NAME_SERVICE_PORT=8000``, and
  ``NAME_SERVICE_PORT_<PORT NAME>=8000`` for a named port;
- ``NAME_PORT=tcp://10.0.0.11:8000`` (its first port);
- ``NAME_PORT_8000_TCP=tcp://10.0.0.11:8000``, then ``_PROTO=tcp``, ``_PORT=8000`` and
  ``_ADDR=10.0.0.11`` after that name (UDP and SCTP ports alike).

Recognised by those fixed shapes, they are no settings: ignored, said in one line at start, never
answered with a "did you mean" (a real typo, ``PROXY_PROT``, still is). ``PROXY_PORT`` is both a
setting and a link's name: holding ``tcp://host:port`` it is the link (the port stays the flag's,
or the default), holding a number it is the setting. Kubernetes' own advice for a pod that does
not use the links: ``enableServiceLinks: false`` in its spec.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

_SHAPES = re.compile(
    r"^[A-Z0-9_]+?_"
    r"(SERVICE_HOST|SERVICE_PORT(_[A-Z0-9_]+)?|PORT_\d+_(TCP|UDP|SCTP)(_PROTO|_PORT|_ADDR)?)$"
)
_LINK_URL = re.compile(r"^(tcp|udp|sctp)://[^\s/]+:\d+$")


def is_service_link(name: str, value: str) -> bool:
    """Whether the variable ``name=value`` has the shape of a Kubernetes service link."""
    if _SHAPES.match(name):
        return True
    return name.endswith("_PORT") and _LINK_URL.match(value) is not None


def service_links(environ: Mapping[str, str], prefix: str) -> list[str]:
    """The names of ``environ``'s variables under ``prefix`` that are service links, sorted."""
    return sorted(
        name
        for name, value in environ.items()
        if name.startswith(prefix) and is_service_link(name, value)
    )
