"""The CPU a run's request pays over the bare path: the splice of its ``model`` (``/runs/<run>/``,
``proxy.runs.names``), in process, for a completion body of ``tokens`` prompt tokens."""

from __future__ import annotations

import timeit

import orjson

from proxy.routing.peek import peek_generation
from proxy.runs.names import scoped, splice_model

CALLS = 20_000  # per repeat; the best of REPEATS is reported (the least disturbed)
REPEATS = 5


def splice_us(tokens: int, model: str = "trl-policy-v7", run: str = "lr3e-5") -> float:
    """Microseconds per splice (the best of ``REPEATS`` runs of ``CALLS``)."""
    body = orjson.dumps({"model": model, "prompt": list(range(tokens)), "max_tokens": 512, "n": 1})
    peek = peek_generation(body, b"prompt")
    new, span = scoped(run, model), (peek.start, peek.end)
    assert splice_model(body, model, new, span) is not None

    def once() -> object:
        return splice_model(body, model, new, span)

    return min(timeit.repeat(once, number=CALLS, repeat=REPEATS)) / CALLS * 1e6
