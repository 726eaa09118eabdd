"""Adapter directories as TRL writes them (``replica_entry.sim.loopback``, shared with the
benchmarks)."""

from replica_entry.sim.loopback import write_adapter

__all__ = ["write_adapter"]
