"""What the suites stand up and drive: child processes, the fast replica and the pass-through
floor they measure against, the load generators and the GRPO-shaped trace they send."""
