"""What a newcomer's settings leave the fleet without, said once at start (WARNING lines).

Each warning names what to do, and suggests only what this proxy can do: the admin API only
when ``--admin-key`` turned it on. Pure apart from the log.
"""

from __future__ import annotations

import logging
from urllib.parse import urlsplit

from proxy.config import Settings

log = logging.getLogger("proxy.fleet")

JOBS_SUFFIX = ".hf.jobs"  # an exposed HF Jobs port: it answers 401 without a bearer token


def startup_warnings(settings: Settings) -> list[str]:
    """The warnings for ``settings``, in the order they are logged."""
    warnings = []
    if not settings.replica_urls and settings.discover_source is None:
        where = (
            "--replica-urls or the admin API"
            if settings.admin_key is not None
            else "--replica-urls"
        )
        warnings.append(f"no replicas configured: add some with {where}")
    if settings.upstream.token is None:
        jobs = [url for url in settings.replica_urls if _is_jobs(url)]
        if jobs:
            warnings.append(
                f"{', '.join(jobs)}: HF Jobs' exposed ports answer 401 without a token; "
                "give one with read access with --upstream-token (PROXY_UPSTREAM_TOKEN)"
            )
    return warnings


def warn_at_start(settings: Settings) -> None:
    for warning in startup_warnings(settings):
        log.warning("%s", warning)


def _is_jobs(url: str) -> bool:
    host = urlsplit(url).hostname or ""
    return host.endswith(JOBS_SUFFIX)
