"""Adapter directories as TRL writes them (shared with the benchmarks)."""

from benchmarks.loopback import write_adapter

__all__ = ["write_adapter"]
