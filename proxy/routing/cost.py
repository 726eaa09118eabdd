"""What a request costs a replica, and how loaded each candidate is. Pure arithmetic, no clock.

Cost of a request, in decode-token equivalents (``CostModel.estimate``): its expected decode
tokens plus ``prefill_weight`` per prompt token, at least 1.
- Expected decode tokens: the request's ``decode_budget`` (prompts x n x max_tokens, every
  prompt of a batch counted) times the share of its budget an answer has used so far (an
  exponential moving average of ``completion_tokens / budget`` over answered requests,
  ``observe``); long-tailed generations make that share well under 1, and the estimate follows
  the run as lengths change.
- Prompt tokens are read from the body's size (``estimate_prompt_tokens``: its bytes over
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
# The decode budget assumed for a request that names none (vLLM's own default depends on the
# route and the context left); it only weighs the request against others.
DEFAULT_MAX_TOKENS = 256


def decode_budget(peek: Peek) -> int:
    """Tokens the request may generate: prompts x n x max_tokens (``DEFAULT_MAX_TOKENS`` when
    it names none)."""
    kind = peek.kind  # a single prompt (the common case) without a second call
    prompts = estimate_prompts(peek) if kind == "batch_tokens" or kind == "batch_text" else 1
    return (peek.max_tokens or DEFAULT_MAX_TOKENS) * peek.n * prompts


def estimate_prompts(peek: Peek) -> int:
    """How many prompts the request holds: 1, or a batch's count read at C speed (each token
    list closes once; each string opens and closes with an unescaped quote), whatever policy
    routes it and however many of its prompts are keyed."""
    kind = peek.kind
    if kind == "batch_tokens":
        return max(1, peek.buffer.count(b"]", peek.start + 1, peek.end - 1))
    if kind == "batch_text":
        buf, start, end = peek.buffer, peek.start, peek.end
        return max(1, (buf.count(b'"', start, end) - buf.count(b'\\"', start, end)) // 2)
    return 1


def estimate_prompt_tokens(peek: Peek) -> int:
    """About how many tokens the prompt holds (exact for nothing, within ~10 % for token ids)."""
    start = peek.start
    size = peek.end - start
    kind = peek.kind  # read once; two compares beat a tuple's ``in`` (this runs per request)
    if kind == "tokens" or kind == "batch_tokens":
        if size <= _SAMPLE:
            return peek.buffer.count(b",", start, start + size) + 1
        commas = peek.buffer.count(b",", start, start + _SAMPLE)
        return size * commas // _SAMPLE if commas else 1
    if kind == "empty":
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
    full: list[bool] | None  # saturated while some other candidate is not; None: none is
    unit: float  # the mean cost of one request in flight, this one included
    mean: float  # the mean load, this request included

    def least(self) -> int:
        """Position of the least-loaded candidate that is not full (ties: the earliest)."""
        values, full = self.values, self.full
        if full is None:
            return values.index(min(values))
        best = -1
        for i, value in enumerate(values):
            if not full[i] and (best < 0 or value < values[best]):
                best = i
        return best

    def takes(self, at: int, limit: float) -> bool:
        """Candidate ``at`` is below ``limit`` and not full."""
        return self.values[at] < limit and (self.full is None or not self.full[at])


def measure(candidates: Sequence[Candidate], request_cost: float) -> Loads:
    """Every candidate's load (see the module docstring); O(candidates), one pass when no
    replica has reported (its figures stale or not scraped)."""
    values: list[float] = []
    append = values.append
    total = 0.0
    inflight = 0
    reported = False
    for c in candidates:
        n = c.inflight
        cost = c.cost
        if cost < n:
            cost = n
        append(cost)
        total += cost
        inflight += n
        if not reported and c.reported is not None:
            reported = True
    unit = (total + request_cost) / (inflight + 1)
    full = None
    if reported:
        flags = []
        for i, c in enumerate(candidates):
            report = c.reported
            if report is None:
                flags.append(False)
                continue
            values[i] += report.foreign * unit
            total += report.foreign * unit
            flags.append(report.saturated)
        if any(flags) and not all(flags):
            full = flags
    return Loads(values, full, unit, (total + request_cost) / len(values))
