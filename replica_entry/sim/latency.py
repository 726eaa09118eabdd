"""How long the simulated engine takes. Pure arithmetic, no clock and no sleeping.

A request costs ``overhead_s + uncached_prompt_tokens * prompt_token_s`` to prefill and
``gen_token_s`` per decode step (all sequences of a request decode in one step, as in a batch),
all scaled by ``1 + batch_factor * other_running_requests`` to model a busier GPU. So the whole
request takes ``(overhead_s + uncached * prompt_token_s + steps * gen_token_s) * scale``; the
fault ``delay_s`` comes on top, outside this model. Every figure is non-negative.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class LatencyModel:
    overhead_s: float = 0.0
    prompt_token_s: float = 0.0
    gen_token_s: float = 0.0
    batch_factor: float = 0.0

    def __post_init__(self) -> None:
        if min(self.overhead_s, self.prompt_token_s, self.gen_token_s, self.batch_factor) < 0:
            raise ValueError("latency figures must be non-negative")

    def scale(self, other_running: int) -> float:
        """The slowdown when ``other_running`` requests share the engine."""
        return 1.0 + self.batch_factor * max(other_running, 0)

    def prefill_s(self, uncached_tokens: int, other_running: int) -> float:
        """Seconds to the first token: overhead plus the prompt tokens not served from cache."""
        base = self.overhead_s + max(uncached_tokens, 0) * self.prompt_token_s
        return base * self.scale(other_running)

    def decode_step_s(self, other_running: int) -> float:
        """Seconds per generated token (one decode step)."""
        return self.gen_token_s * self.scale(other_running)

    def request_s(self, uncached_tokens: int, steps: int, other_running: int) -> float:
        """The whole request: prefill, then ``steps`` decode steps."""
        return self.prefill_s(uncached_tokens, other_running) + max(steps, 0) * self.decode_step_s(
            other_running
        )
