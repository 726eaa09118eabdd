"""The fleet simulator: step time of async GRPO on a simulated vLLM fleet behind the proxy's
real routing policies, in simulated time (``python -m benchmarks fleet``; README.md here)."""
