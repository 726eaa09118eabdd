"""Benchmarks as reports, not timed tests (``python -m benchmarks SUITE``; README.md here).

The suites (``overhead``, ``routing``, ``fleet``, ``sync``, ``policy``, ``soak``, ``scale``,
``profile``; ``__main__`` lists what each measures) and what they are built from: the load
generators (``blast``, ``loadgen``) and GRPO-shaped traces (``trace``), the stand-ins they run
against (``fast_replica``, the ``passthrough`` transport floor), the routing and fleet simulators
(``routing_sim``, ``fleet``), the reports (``report``), and ``make demo`` (``demo``).
"""
