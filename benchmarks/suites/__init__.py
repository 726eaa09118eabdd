"""What ``python -m benchmarks SUITE`` runs: one module per suite, each with its grid, its
measurement and its table."""
