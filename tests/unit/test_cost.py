"""The cost model and the load figures policies decide on: pure arithmetic."""

from __future__ import annotations

import json
import random

from proxy.routing.cost import (
    DEFAULT_MAX_TOKENS,
    CostModel,
    decode_budget,
    estimate_prompt_tokens,
    measure,
)
from proxy.routing.least_loaded import LeastLoaded
from proxy.routing.peek import peek_generation
from proxy.routing.policy import RouteRequest, Snapshot
from tests.support.candidates import Fake, Report


def test_prompt_tokens_are_estimated_from_the_body_size() -> None:
    rng = random.Random(1)
    for length in (5, 600, 3000):
        ids = [rng.randrange(150_000) for _ in range(length)]
        peek = peek_generation(json.dumps({"model": "m", "prompt": ids}).encode(), b"prompt")
        assert abs(estimate_prompt_tokens(peek) - length) <= 0.1 * length + 1
    text = peek_generation(b'{"prompt": "' + b"word " * 400 + b'"}', b"prompt")
    assert 400 <= estimate_prompt_tokens(text) <= 600


def test_the_decode_budget_counts_every_prompt_of_a_batch_whatever_the_policy() -> None:
    def budget(body: dict[str, object]) -> int:
        return decode_budget(peek_generation(json.dumps(body).encode(), b"prompt"))

    assert budget({"prompt": [1, 2, 3], "max_tokens": 100, "n": 8}) == 800
    assert budget({"prompt": "hi"}) == DEFAULT_MAX_TOKENS
    tokens = [[i, i + 1, i + 2] for i in range(40)]  # more than the 32 prompts keys are read of
    assert budget({"prompt": tokens, "max_tokens": 10}) == 400
    texts = ['say "hi", then [stop]', "b", "c, d"]  # quotes, commas, brackets inside strings
    assert budget({"prompt": texts, "max_completion_tokens": 5, "n": 2}) == 30


def test_cost_grows_with_the_budget_and_the_prompt_and_learns_the_decode_share() -> None:
    model = CostModel(prefill_weight=0.15, smoothing=0.5)
    assert model.estimate(1000, 1000) == 1000 + 150
    assert model.estimate(0, 0) == 1.0  # never below one request
    for _ in range(20):
        model.observe(1000, 250)  # answers use a quarter of their budget
    assert abs(model.decode_share - 0.25) < 0.01
    assert abs(model.estimate(1000, 1000) - (250 + 150)) < 10
    model.observe(0, 5)  # no budget known: nothing learned
    assert abs(model.decode_share - 0.25) < 0.01


def test_loads_add_foreign_requests_and_mark_full_replicas() -> None:
    a = Fake("a", inflight=2, cost=200.0)
    b = Fake("b", inflight=2, cost=200.0, reported=Report(foreign=3.0))
    c = Fake("c", inflight=0, cost=0.0, reported=Report(saturated=True))
    loads = measure([a, b, c], request_cost=100.0)
    assert loads.unit == (400 + 100) / 5
    assert loads.values == [200.0, 200.0 + 3 * 100.0, 0.0]
    assert loads.full == [False, False, True]
    assert loads.least() == 0  # c is idle but says it is full


def test_when_every_replica_is_full_none_counts_as_full() -> None:
    fleet = [Fake(str(i), inflight=i, cost=10.0 * i, reported=Report(saturated=True))
             for i in range(3)]  # fmt: skip
    loads = measure(fleet, 10.0)
    assert loads.full is None  # nobody counts as full
    assert loads.least() == 0


def test_least_loaded_goes_by_work_not_request_count() -> None:
    # One replica holds 2 long generations, the other 6 short ones: the short ones' replica has
    # less work left, though more requests.
    long, short = Fake("long", inflight=2, cost=2 * 4000.0), Fake("short", inflight=6, cost=600.0)
    snapshot = Snapshot([long, short], ("long", "short"))
    assert LeastLoaded().select(snapshot, RouteRequest("m", cost=100.0)).replica_id == "short"
    # Without cost estimates (cost below the request count) it is the fewest requests.
    blind = [Fake("a", inflight=2), Fake("b", inflight=6)]
    chosen = LeastLoaded().select(Snapshot(blind, ("a", "b")), RouteRequest("m"))
    assert chosen.replica_id == "a"
