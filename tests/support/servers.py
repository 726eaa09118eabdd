"""Real aiohttp applications on loopback for tests (shared with the benchmarks)."""

from benchmarks.loopback import free_port, serve

__all__ = ["free_port", "serve"]
