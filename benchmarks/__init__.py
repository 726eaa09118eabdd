"""Benchmarks as reports, not timed tests (``python -m benchmarks SUITE``; the file map is in
README.md here).

The suites (``suites``: ``overhead``, ``routing``, ``fleet``, ``sync``, ``policy``, ``soak``,
``scale``, ``profile``) and what they are built from: the load generators, GRPO-shaped traces and
the stand-ins they run against (``harness``), in-process timings of the routing path (``micro``),
the routing and fleet simulators (``sims``, ``fleet``), the two adapter-sync engines (``sync``),
the reports (``report``), and ``make demo`` (``demo``).
"""
