"""Suite ``ab``: two servers' CPU per request, paired, in front of the same replicas.

``flags`` (its command line, read by ``python -m benchmarks``), ``targets`` (what a side is and
where its code comes from), ``rounds`` (the measurement), ``summary`` (the arithmetic, no I/O),
``suite`` (the run, its tables and JSON).
"""
