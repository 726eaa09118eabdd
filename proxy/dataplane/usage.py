"""Usage accounting: the prompt and cached-token counts a replica reports with its answer.

vLLM puts ``usage`` at the end of a completion answer; only the tail is searched (C-level regex
over at most ``TAIL`` bytes), so the cost does not grow with the answer.
"""

from __future__ import annotations

import re

TAIL = 600
_PROMPT = re.compile(rb'"prompt_tokens"\s*:\s*([0-9]+)')
_CACHED = re.compile(rb'"cached_tokens"\s*:\s*([0-9]+)')


def usage(answer: bytes) -> tuple[int, int] | None:
    """(prompt tokens, cached prompt tokens) from an answer's ``usage``, or None."""
    tail = answer[-TAIL:]
    prompt = _PROMPT.search(tail)
    if prompt is None:
        return None
    cached = _CACHED.search(tail)
    return int(prompt[1]), int(cached[1]) if cached else 0
