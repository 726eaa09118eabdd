"""What a request costs a replica, and how loaded each candidate is. Pure arithmetic, no clock.

Cost of a request, in decode-token equivalents (``CostModel.estimate``): its expected decode
tokens plus ``prefill_weight`` per prompt token, at least 1.
- Expected decode tokens: ``decode_budget`` (prompts x n x max_tokens) times the share of its
  budget an answer has used so far (an exponential moving average of ``completion_tokens /
  budget`` over answered requests, ``observe``); long-tailed generations make that share well
  under 1, and the estimate follows the run as lengths change.
- Prompt tokens are read from the body's size (``prompt_tokens``: the bytes of the prompt over
  the bytes per token of its first 256 bytes), never counted one by one: a C-level slice, not a
  pass over thousands of ids.
- ``prefill_weight`` 0.15: on an H100/H200 a ~1.5B model prefills ~50-100k tokens/s and decodes
  ~10k tokens/s at a batch of 128 (benchmarks/fleet/README.md), so a prompt token costs about a
  tenth of a generated one; cached prompt tokens cost less still, which affinity arranges.
A replica's cost (``Candidate.cost``) is the sum over the requests the proxy has in flight
there, added when a request is placed and taken away when its answer is done (the limiter).

Load of a candidate (``measure``), in the same units: its cost plus the requests it reported
that this proxy did not send (``Reported.foreign``) at the mean cost of a request; a replica
that reports itself full (``Reported.saturated``) takes new work only when every candidate is.
Cost: O(candidates) per decision.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from proxy.routing.peek import Peek
from proxy.routing.policy import Candidate

_SAMPLE = 256  # bytes of a prompt read to learn its bytes per token
_CHARS_PER_TOKEN = 4.0  # text and chat prompts


def estimate_prompt_tokens(peek: Peek) -> int:
    """About how many tokens the prompt holds (exact for nothing, within ~10 % for token ids)."""
    size = peek.end - peek.start
    if peek.kind in ("tokens", "batch_tokens"):
        head = peek.buffer[peek.start : peek.start + _SAMPLE]
        commas = head.count(b",")
        if size <= _SAMPLE or commas == 0:
            return commas + 1
        return int(size * commas / len(head))
    if peek.kind == "empty":
        return 0
    return max(1, int(size / _CHARS_PER_TOKEN))


class CostModel:
    """Estimates request costs; learns what share of its budget an answer uses."""

    def __init__(self, prefill_weight: float = 0.15, smoothing: float = 0.02) -> None:
        self.prefill_weight = prefill_weight
        self.smoothing = smoothing
        self.decode_share = 1.0  # until an answer says otherwise: the whole budget

    def estimate(self, prompt: int, decode_budget: int) -> float:
        return max(1.0, decode_budget * self.decode_share + self.prefill_weight * prompt)

    def observe(self, decode_budget: int, completion_tokens: int) -> None:
        """One answered request: it generated ``completion_tokens`` of ``decode_budget``."""
        if decode_budget <= 0:
            return
        share = min(completion_tokens / decode_budget, 1.0)
        self.decode_share += self.smoothing * (share - self.decode_share)


@dataclass(slots=True)
class Loads:
    """The candidates' loads for one decision, in cost units, and what bounds them."""

    values: list[float]
    full: list[bool]  # saturated, and some other candidate is not
    unit: float  # the mean cost of one request in flight, this one included
    mean: float  # the mean load, this request included
    index: dict[str, int]  # candidate id -> position

    def least(self) -> int:
        """Position of the least-loaded candidate that is not full (ties: the earliest)."""
        values, full = self.values, self.full
        best = -1
        for i, value in enumerate(values):
            if not full[i] and (best < 0 or value < values[best]):
                best = i
        return best


def measure(candidates: Sequence[Candidate], request_cost: float) -> Loads:
    """Every candidate's load (see the module docstring); O(candidates)."""
    costs: list[float] = []
    reports = []
    inflight = 0
    for c in candidates:
        costs.append(max(c.cost, float(c.inflight)))
        reports.append(c.reported)
        inflight += c.inflight
    unit = (sum(costs) + request_cost) / (inflight + 1)
    values = costs
    saturated = [False] * len(costs)
    for i, report in enumerate(reports):
        if report is not None:
            values[i] += report.foreign * unit
            saturated[i] = report.saturated
    if all(saturated):
        saturated = [False] * len(costs)
    mean = (sum(values) + request_cost) / len(values)
    index = {c.id: i for i, c in enumerate(candidates)}
    return Loads(values, saturated, unit, mean, index)
