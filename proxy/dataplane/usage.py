"""Usage accounting: the token counts a replica reports with its answer.

vLLM puts ``usage`` at the end of a completion answer and near the start of a token-in
(``/inference/v1/generate``) one; only the tail, then the head, is searched (C-level regex over
at most ``TAIL`` bytes each), so the cost does not grow with the answer.
"""

from __future__ import annotations

import re
from typing import NamedTuple

TAIL = 600
_PROMPT = re.compile(rb'"prompt_tokens"\s*:\s*([0-9]+)')
_CACHED = re.compile(rb'"cached_tokens"\s*:\s*([0-9]+)')
_COMPLETION = re.compile(rb'"completion_tokens"\s*:\s*([0-9]+)')


class Usage(NamedTuple):
    prompt: int
    cached: int  # prompt tokens served from the replica's prefix cache
    completion: int


def usage(answer: bytes) -> Usage | None:
    """The token counts of an answer's ``usage``, or None."""
    for part in (answer[-TAIL:], answer[:TAIL]):
        prompt = _PROMPT.search(part)
        if prompt is not None:
            cached = _CACHED.search(part)
            completion = _COMPLETION.search(part)
            return Usage(
                int(prompt[1]),
                int(cached[1]) if cached else 0,
                int(completion[1]) if completion else 0,
            )
    return None
