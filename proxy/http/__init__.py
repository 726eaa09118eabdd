"""The HTTP edge: what clients talk to.

Holds the route table (``routes``), the layers every request passes through (``edge``), the
handlers (``handlers``: read, classify, delegate, answer), the one body reader (``bodies``), the
admin API (``admin``, ``run_admin``), inbound key checks (``auth``), the one error table
(``errors``: every error answer the proxy makes, from a domain error, counted) and the edge's
own errors (``refusals``), the answers that are not errors (``responses``: aggregated fan-out
and adapter answers), the proxy's own adapter receiver routes (``receiver``), what the proxy
reads of itself across the rooms (``status``: the status page, the advisor's samples, the
scrape-time gauges' sources) and the edge's wiring (``wiring``).

Rules: the only room that turns outcomes into HTTP answers. May import every other room of the
proxy; nothing imports it but ``proxy.app`` and ``proxy.cli``.
"""
