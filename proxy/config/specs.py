"""The settings whose text has a shape of its own: a discovery spec, a bucket path, a replica URL.

Each parser raises ValueError naming the fault and the shape wanted; messages never show a URL's
credentials (``hide_credentials``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import urlsplit


@dataclass(frozen=True)
class JobsLabel:
    """``hf-jobs:LABEL=VALUE``: the RUNNING jobs carrying that label, by their exposed URLs."""

    label: str
    value: str


@dataclass(frozen=True)
class DnsName:
    """``dns:NAME:PORT``: every address NAME resolves to, over plain HTTP on PORT (an HF Jobs
    network group's alias: ``${HF_NETWORK_GROUP_PREFIX}replica``)."""

    name: str
    port: int


def parse_discover_spec(spec: str) -> JobsLabel | DnsName:
    """``--discover`` -> what ``proxy.fleet.discovery`` looks up; ValueError naming the fault."""
    kind, _, selector = spec.partition(":")
    if kind == "hf-jobs":
        label, _, value = selector.partition("=")
        if label and value:
            return JobsLabel(label, value)
    elif kind == "dns":
        name, _, port = selector.rpartition(":")
        name = name.strip("[]")
        if name and port.isdigit() and 0 < int(port) <= 65535 and name.isprintable():
            return DnsName(name, int(port))
    raise ValueError(f"--discover {spec!r} must look like hf-jobs:LABEL=VALUE or dns:NAME:PORT")


def split_bucket(spec: str) -> tuple[str, str]:
    """``NAMESPACE/BUCKET[/PREFIX]`` -> (``NAMESPACE/BUCKET``, ``PREFIX``); ValueError if not."""
    parts = spec.strip("/").split("/")
    if len(parts) < 2 or not all(parts[:2]):
        raise ValueError(f"--adapters-bucket {spec!r} must look like NAMESPACE/BUCKET[/PREFIX]")
    return "/".join(parts[:2]), "/".join(parts[2:])


_URL_CREDENTIALS = re.compile(r"(?<=://)[^/@\s]*@")


def hide_credentials(text: str) -> str:
    """``text`` with the ``user:password@`` part of any URL in it replaced by ``***@``."""
    return _URL_CREDENTIALS.sub("***@", text)


MAX_REPLICA_URL_CHARS = 2048  # a replica URL, from a flag, a discovery or the admin API


def check_replica_url(url: str) -> str:
    """Raise ValueError unless ``url`` is an absolute http(s) URL with a host, a valid port, and
    no credentials, query or fragment, at most ``MAX_REPLICA_URL_CHARS`` long. Messages never
    show credentials."""
    if len(url) > MAX_REPLICA_URL_CHARS:
        raise ValueError(
            f"a replica URL must be at most {MAX_REPLICA_URL_CHARS} characters ({len(url)} given)"
        )
    shown = hide_credentials(url)
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"replica URL {shown!r} must look like http://HOST:PORT or https://HOST")
    if "@" in parts.netloc:
        raise ValueError(
            f"replica URL {shown!r} must not carry credentials (user:password@): "
            "give the token with --upstream-token (PROXY_UPSTREAM_TOKEN) instead"
        )
    if parts.query or parts.fragment:
        raise ValueError(f"replica URL {shown!r} must not carry a query or fragment")
    try:
        parts.port  # noqa: B018  (urlsplit checks the port only when asked)
    except ValueError as exc:
        raise ValueError(f"replica URL {shown!r} has a bad port: {exc}") from None
    if any(ord(c) < 33 or ord(c) > 126 for c in url):
        raise ValueError(f"replica URL {shown!r} must be printable ASCII without spaces")
    return url
