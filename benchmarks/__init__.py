"""Load generation, GRPO-shaped traces, the demo and (later) the benchmark suites."""
