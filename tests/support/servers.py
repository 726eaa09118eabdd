"""Real aiohttp applications on loopback for tests (``replica_entry.sim.loopback``, shared with
the benchmarks)."""

from replica_entry.sim.loopback import free_port, serve

__all__ = ["free_port", "serve"]
