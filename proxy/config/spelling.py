"""The closest known name to a misspelt one: every "did you mean" of the programs (a flag, a
``PROXY_*`` variable, a config-file key) comes from here, so they all answer alike.

difflib's ratio (twice the matching characters over both lengths), the best above 0.6: a
transposition (``--replcia-urls``) or a dropped letter (``--replica-url``) is found, an unrelated
word is not. Cost: one comparison per known name, at start-up only.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable

CUTOFF = 0.6  # difflib's own default: below it two names share too little to suggest one


def closest(given: str, known: Iterable[str]) -> str | None:
    """The known name most like ``given``, or None when none is close."""
    found = difflib.get_close_matches(given, list(known), n=1, cutoff=CUTOFF)
    return found[0] if found else None
