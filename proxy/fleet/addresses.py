"""Host names and IP addresses, read without I/O. Standard library only: ``replica_entry``
imports it on the vLLM image, where none of the proxy's own dependencies is installed."""

from __future__ import annotations

import ipaddress


def is_ip(host: str) -> bool:
    """``host`` is an IPv4 or IPv6 address (brackets allowed)."""
    try:
        ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return False
    return True


def is_loopback(host: str) -> bool:
    """``localhost``, or a loopback address (``127.0.0.0/8``, ``::1``; brackets allowed)."""
    return host == "localhost" or (
        is_ip(host) and ipaddress.ip_address(host.strip("[]")).is_loopback
    )
