"""Several RL runs on one fleet: each run is a path prefix of the proxy's URL (``/runs/<run>``);
the bare path is the default run.

- ``run``: what a request's run decides (names and paths, its pause gate, its shares, TRL's pause
  and resume, what TRL reads of its server), and the default run (``DEFAULT``), stateless;
- ``names``: a run's adapter names on the replicas (``<run>.<name>``) and the translation both
  ways: the ``model`` of a generation request (a splice of its bytes), and what the proxy
  answers;
- ``table``: the declared runs, their weights, shares of ``max_loras`` and pause gates;
- ``staleness``: what a run's share of ``max_loras`` lets TRL do, in words.

It may import the standard library and orjson only (the bottom layer, beside ``routing``): config
parses ``--runs`` with ``table``; what a run does that needs the fleet (its pause's fan-out) is
passed in by the edge (``run.Control``).
"""
