"""The HTTP edge: what clients talk to.

Holds the route table (``routes``), the handlers (``handlers``: authenticate, read, classify,
delegate, record), the admin API (``admin``), inbound key checks (``auth``) and every response
body the proxy builds itself (``responses``: vLLM-shaped errors, aggregated fan-out and adapter
answers), the proxy's own adapter receiver routes (``receiver``), what the proxy reads of itself
across the rooms (``status``: the status page, the advisor's samples, the scrape-time gauges'
sources) and the edge assembled (``room``).

Rules: the only room that turns outcomes into HTTP answers. May import every other room of the
proxy; nothing imports it but ``proxy.app`` and ``proxy.cli``.
"""
