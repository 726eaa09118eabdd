"""Several RL runs on one fleet: each run is a path prefix of the proxy's URL (``/runs/<run>``).

- ``names``: a run's adapter names on the replicas (``<run>.<name>``) and the translation both
  ways: the ``model`` of a generation request (a splice of its bytes), load and unload bodies,
  and what the proxy answers.
- ``table``: the declared runs, their weights, shares of ``max_loras`` and pause gates.

It may import the standard library and orjson only (the bottom layer, beside ``routing``): config
parses ``--runs`` with ``table``, and the edge (``http.runs``) composes the rest.
"""
