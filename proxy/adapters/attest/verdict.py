"""The one vocabulary of the served-policy check, for every place that speaks of it.

A ``Verdict`` is what a replica's copy of a version was judged (``check.ServedPolicyCheck``):

- ``ok``: it answers the probe as the trainer computed it (or, without a reference, its answer
  moved with the fleet's);
- ``unchecked``: no probe could be made yet (plain TRL's first version comes before its first
  prompt): served, and checked once a probe can be made;
- ``unverifiable``: the replica cannot answer a probe at all (an HTTP error): served unchecked;
- ``pending``: a replica that lost the fleet's trust (withheld for ``repeat`` versions, without a
  reference) answered, and no other replica's answer for the version exists yet to compare it
  with: not routed for it until one does (or until no other replica can answer: then served,
  the alarm raised already), so trust is earned again version by version;
- ``mismatch``: one probe disagreed: the version is loaded once more there and probed again;
- ``withheld``: it disagreed again (or, without a reference, the replica has been suspect for
  ``repeat`` versions): never routed for that version, unless no replica agrees.

A probe that found nothing yet (its deadline passed, the replica was unreachable) is ``None``:
tried again later. ``/proxy/status`` shows each held copy's verdict, or ``probing`` (loaded, no
verdict yet) or ``stale`` (other content under a name now wanted): states of the copy, not
verdicts (``HELD_STATES``).
"""

from __future__ import annotations

import enum


class Verdict(enum.StrEnum):
    OK = "ok"
    UNCHECKED = "unchecked"
    UNVERIFIABLE = "unverifiable"
    PENDING = "pending"
    MISMATCH = "mismatch"
    WITHHELD = "withheld"

    @property
    def served(self) -> bool:
        """A copy judged so may be routed for (``withheld`` only when no replica agrees)."""
        return self in (Verdict.OK, Verdict.UNCHECKED, Verdict.UNVERIFIABLE)


PROBING = "probing"  # loaded, not judged yet
STALE = "stale"  # other content held under a name now wanted
HELD_STATES = (*(v.value for v in Verdict), PROBING, STALE)
