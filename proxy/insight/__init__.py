"""Insight: what limits the run, from what the proxy sees.

Holds the bottleneck advisor (``advisor``: pure verdicts over a window of samples of the run,
with the figures behind each) and the sampler (``sampler``: a background loop that takes a
sample of the run every ``window / 60`` seconds and keeps the window).

Rules: pure or nearly (the sampler's one I/O is reading the clock it is given); the sample is read
through a function the app composes (``proxy.http.status.Status.sample``), so this room imports only
``proxy.clock``."""
