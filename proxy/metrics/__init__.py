"""Metrics: what the proxy exports to Prometheus.

Holds the fixed label sets and bucket bounds (``labels``), every family as a row of data
(``families``), the lock-free request-path counters and histograms (``tally``), the gauges read
at scrape time (``collector``) and ``Metrics`` (``recorder``): the one ``record_*`` API every
room calls (the adapter push's and mirror's figures too), and the page ``/metrics`` renders.

Rules: records what it is told and reads state at scrape time; never decides anything. May
import the standard library, prometheus_client, ``proxy.fleet`` (replica state to export) and
its own modules.
"""
