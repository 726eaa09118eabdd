"""``python -m benchmarks learn``: does GRPO through the fleet learn, and as fast as on one server?

Real TRL, real vLLM CPU servers, the proxy; a task a tiny local model learns on these CPUs in
minutes (``task``, ``warm``). The same seed runs twice (``legs``): through the proxy beside the
trainer with two replicas, and straight to one vLLM server. ``verdict`` says whether a run
learned (the last steps' mean reward over the first steps' by a margin of their spread) and
stayed on policy (TRL's ``kl`` under a bound at every step but a tenth of them).
"""
