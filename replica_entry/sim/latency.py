"""How long the simulated engine takes. Pure arithmetic, no clock and no sleeping.

A request costs ``overhead_s + uncached_prompt_tokens * prompt_token_s`` to prefill and
``gen_token_s`` per decode step (all sequences of a request decode in one step, as in a batch),
all scaled by ``1 + batch_factor * other_running_requests`` to model a busier GPU. So the whole
request takes ``(overhead_s + uncached * prompt_token_s + steps * gen_token_s) * scale``; the
fault ``delay_s`` comes on top, outside this model. Every figure is non-negative.

A run whose completions shrink (or grow) as it trains: from adapter version ``later_version`` on
(a request for ``trl-policy-vN`` with N at least that, the name's ``-vN``), a decode step costs
``later_gen_token_s`` instead of ``gen_token_s``. It follows the version a request asks for, not
the clock or a count of requests, so every replica, one that joined late too, changes at the
same training step.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_VERSION = re.compile(r"-v(\d+)$")


def version_of(adapter: str | None) -> int | None:
    """The N of an adapter named ``...-vN`` (None: the base model, or a name without one)."""
    found = _VERSION.search(adapter or "")
    return int(found.group(1)) if found else None


@dataclass(frozen=True, slots=True)
class LatencyModel:
    overhead_s: float = 0.0
    prompt_token_s: float = 0.0
    gen_token_s: float = 0.0
    batch_factor: float = 0.0
    later_version: int | None = None
    later_gen_token_s: float = 0.0

    def __post_init__(self) -> None:
        figures = (self.overhead_s, self.prompt_token_s, self.gen_token_s, self.batch_factor,
                   self.later_gen_token_s)  # fmt: skip
        if min(figures) < 0:
            raise ValueError("latency figures must be non-negative")

    def scale(self, other_running: int) -> float:
        """The slowdown when ``other_running`` requests share the engine."""
        return 1.0 + self.batch_factor * max(other_running, 0)

    def prefill_s(self, uncached_tokens: int, other_running: int) -> float:
        """Seconds to the first token: overhead plus the prompt tokens not served from cache."""
        base = self.overhead_s + max(uncached_tokens, 0) * self.prompt_token_s
        return base * self.scale(other_running)

    def decode_step_s(self, other_running: int, adapter: str | None = None) -> float:
        """Seconds per generated token (one decode step) of a request for ``adapter``."""
        return self.per_token_s(adapter) * self.scale(other_running)

    def per_token_s(self, adapter: str | None) -> float:
        """``later_gen_token_s`` for a request of version ``later_version`` or newer, else
        ``gen_token_s``."""
        version, later = version_of(adapter), self.later_version
        if later is not None and version is not None and version >= later:
            return self.later_gen_token_s
        return self.gen_token_s

    def request_s(
        self, uncached_tokens: int, steps: int, other_running: int, adapter: str | None = None
    ) -> float:
        """The whole request: prefill, then ``steps`` decode steps."""
        decode = max(steps, 0) * self.decode_step_s(other_running, adapter)
        return self.prefill_s(uncached_tokens, other_running) + decode
