"""A generation request's routing facts, built in one place (``Facts.build``).

From the body's raw bytes: the peek (model, prompt span, decode budget), the check that the
model is one the fleet serves, the content keys (unless the client named a routing key), the
sampled prefix-reuse estimate, the decode budget and the cost estimate, as one ``RouteRequest``.
The HTTP handler calls it for every generation request and the simulators and benchmarks in
``benchmarks/`` call the same method, so what they measure is the proxy's own path.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import xxhash

from proxy.errors import DomainError
from proxy.routing.cost import CostModel, decode_budget, estimate_prompt_tokens
from proxy.routing.peek import DEFAULT_MAX_ELEMENTS, Peek, peek_generation, prompt_tokens
from proxy.routing.policy import Policy, RouteRequest
from proxy.routing.reuse import ReuseEstimator

SINGLE_PROMPTS = ("tokens", "text", "messages")  # the prompts the reuse estimate samples
CONVERSATION_BYTES = 2048  # what identifies a conversation when no routing key does


class UnknownModel(DomainError):
    """The body names a model no replica serves or loads (answered 404, in vLLM's words)."""

    reason = "unknown_model"
    param = "model"

    def __init__(self, model: str) -> None:
        super().__init__(f"The model `{model}` does not exist.")
        self.model = model


def _never(model: str) -> bool:
    return False


@dataclass(slots=True)
class Reuse:
    """The sampled estimate of the prefix reuse the traffic offers (``routing.reuse``), and
    where each sampled prompt's figures go: ``record(prompt tokens, available tokens)``."""

    estimator: ReuseEstimator
    record: Callable[[int, int], None]

    def consider(self, peek: Peek, keys: tuple[int, ...], model: str | None) -> None:
        estimator = self.estimator
        if not estimator.sampled(_conversation(peek, keys)):
            return
        seed = xxhash.xxh64_intdigest((model or "").encode())
        size, available = estimator.observe(peek.buffer, peek.start, peek.end, seed)
        if size:
            tokens = prompt_tokens(peek)
            self.record(tokens, tokens * available // size)


def _conversation(peek: Peek, keys: tuple[int, ...]) -> int:
    """What samples a prompt for the reuse estimate: its routing key (one per conversation),
    or, under a policy that makes none, a hash of its first ``CONVERSATION_BYTES``."""
    if keys:
        return keys[0]
    end = min(peek.end, peek.start + CONVERSATION_BYTES)
    return xxhash.xxh64_intdigest(peek.buffer[peek.start : end])


@dataclass(slots=True)
class Facts:
    """Builds routing facts for one proxy (or one simulated proxy).

    ``costs``: None for a proxy that weighs every request the same (cost 1, as
    ``benchmarks/fleet``'s uninformed proxy); ``unknown(model)``: True for a model the fleet
    neither serves nor loads (``fleet.sync.FleetSync.unknown``); ``reuse``: the sampled reuse
    estimate, if kept."""

    policy: Policy
    costs: CostModel | None = None
    max_elements: int = DEFAULT_MAX_ELEMENTS
    unknown: Callable[[str], bool] = _never
    reuse: Reuse | None = None

    def build(self, body: bytes, prompt_key: bytes, routing_key: str | None = None) -> RouteRequest:
        """Raises ``peek.BadBody`` (a 400) or ``UnknownModel`` (a 404); nothing is learned
        from a request that raises."""
        return self.from_peek(peek_generation(body, prompt_key, self.max_elements), routing_key)

    def from_peek(self, peek: Peek, routing_key: str | None = None) -> RouteRequest:
        """``build`` from a peek already made (a run's request with its model spliced)."""
        model = peek.model
        if model is not None and self.unknown(model):
            raise UnknownModel(model)
        if routing_key is None:
            keys, hint = self.policy.route_keys(peek, model)
        else:
            keys, hint = (), None
        reuse = self.reuse
        if reuse is not None and peek.kind in SINGLE_PROMPTS:
            reuse.consider(peek, keys, model)
        budget = decode_budget(peek)
        costs = self.costs
        cost = costs.estimate(estimate_prompt_tokens(peek), budget) if costs is not None else 1.0
        return RouteRequest(model, routing_key, keys, cost, budget, hint)
