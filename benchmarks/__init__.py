"""Benchmark suites, their harness and simulators, and the demo (file map: README.md here)."""
