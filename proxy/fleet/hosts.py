"""Which hosts may become replicas at run time (the admin API's add): an allowlist of patterns.

A replica gets the proxy's upstream token on every request (in ``deploy``, the user's HF token),
so whoever may add one may send that token anywhere it names. ``--replica-hosts`` lists host
patterns (``fnmatch``: ``*.hf.jobs``, ``10.0.0.*``, ``gpu-3``); without it the default is:

- the domain of each replica given at start (``r1.gpu.example`` allows ``*.gpu.example``; an
  exposed HF Jobs URL allows ``*.hf.jobs``; an IP address or a single-label name only itself);
- ``*.hf.jobs`` when replicas are discovered through the HF Jobs API;
- loopback (``127.*``, ``::1``, ``localhost``) only when the proxy itself listens there: a
  proxy reachable from outside never sends its token to its own machine's other ports.

Link-local and other addresses are never allowed by default. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from fnmatch import fnmatchcase
from urllib.parse import urlsplit

from proxy.config import JobsLabel, Settings
from proxy.fleet.addresses import is_ip, is_loopback

LOOPBACK = ("127.*", "::1", "localhost")
JOBS = "*.hf.jobs"


def domain_pattern(host: str) -> str:
    """The pattern a configured replica host stands for (module docstring)."""
    if is_ip(host) or "." not in host:
        return host
    return "*." + host.split(".", 1)[1]


@dataclass(frozen=True)
class HostAllowlist:
    patterns: tuple[str, ...]

    @classmethod
    def default(
        cls, replicas: Iterable[str], *, discovering: bool, listen_host: str
    ) -> HostAllowlist:
        patterns: list[str] = []
        for url in replicas:
            host = (urlsplit(url).hostname or "").lower()
            if host and not is_loopback(host):
                patterns.append(domain_pattern(host))
        if discovering:
            patterns.append(JOBS)
        if is_loopback(listen_host):
            patterns.extend(LOOPBACK)
        return cls(tuple(dict.fromkeys(patterns)))

    @classmethod
    def of(cls, settings: Settings) -> HostAllowlist:
        """``--replica-hosts`` when given, else the default."""
        if settings.replica_hosts:
            return cls(tuple(p.lower() for p in settings.replica_hosts))
        return cls.default(
            settings.replica_urls,
            discovering=isinstance(settings.discover_source, JobsLabel),
            listen_host=settings.host,
        )

    def allows(self, url: str) -> bool:
        host = (urlsplit(url).hostname or "").lower()
        return bool(host) and any(fnmatchcase(host, pattern) for pattern in self.patterns)
