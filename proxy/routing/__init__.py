"""Routing policies: pure, synchronous functions of a snapshot of candidate replicas.

A policy never awaits, never touches aiohttp objects and never reads a clock. It receives the
replicas that may take the request (eligible and with a free slot) and the request's routing
facts, and returns a Decision carrying the chosen replica id and the reason; the caller records
the reason as a metric.
"""

from proxy.routing.base import (
    Candidate,
    Decision,
    Policy,
    PolicySettings,
    RouteRequest,
    Snapshot,
    build_policy,
)

__all__ = [
    "Candidate",
    "Decision",
    "Policy",
    "PolicySettings",
    "RouteRequest",
    "Snapshot",
    "build_policy",
]
