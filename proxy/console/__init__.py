"""Console: looking at a running proxy from a terminal (``rollout-proxy top``).

Holds the client side only: it reads a proxy's ``/proxy/status`` and ``/metrics`` over HTTP
(``figures``: pure parsing of what they say into numbers a person reads) and draws them with
rich (``top``: a live view, or ``--once`` plain text for scripts and CI logs).

Rules: talks to a proxy the way any client does; may import the standard library, aiohttp,
prometheus_client's text parser and rich, and none of the proxy's other rooms, but for
``flags``: top's flags are read as every program's are (``proxy.config.programs``, ``units``).
"""
