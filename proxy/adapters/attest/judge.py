"""Comparative evidence of the served policy, when the version carries no trainer's reference.

Each replica's probe answers are kept: its base model's, and each version's (the newest
``keep`` versions). A replica's answer for a version is *stale* when it equals, within the
tolerance, its base model's answer or any answer given for an earlier version (by any replica:
the fleet serves one base model); a replica is *suspect* for the version when its answer is stale
while another replica's answer for it is not: that one shows the version moved, this one did not
follow (it answers the base model, or an older version, under the new name).

One comparison must never withhold an honest replica: under the published recipe (lr 4e-5, rank
1) a version moves the logprobs less than bf16 noise between two replicas. So the first
suspicion raises the fleet's alarm, and a replica is withheld only once it has been suspect for
``repeat`` versions: from then on (it is ``distrusted``), from each version it is suspect for,
and its answer alone proves nothing: it is judged on a version only once another replica's
answer for it exists (``compared``), since an answer that moved nowhere yet cannot be told from
one that never will. Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Sequence

from proxy.adapters.attest.probe import gap
from proxy.adapters.registry import version_number

Answer = tuple[float, ...]


class Judge:
    def __init__(self, repeat: int, keep: int = 16) -> None:
        self.repeat = repeat
        self.keep = keep
        self._bases: dict[str, Answer] = {}  # replica -> its base model's answer
        self._answers: dict[str, dict[str, Answer]] = {}  # version -> replica -> answer
        self._suspect: dict[str, set[str]] = {}  # replica -> versions it was suspect for
        self.alarm = False  # some replica has been suspect (the fleet-wide alarm)

    def forget(self, replica: str) -> None:
        """``replica`` restarted: its answers are gone (its suspicions stay: they happened)."""
        self._bases.pop(replica, None)
        for answers in self._answers.values():
            answers.pop(replica, None)

    def has_base(self, replica: str) -> bool:
        return replica in self._bases

    def base(self, replica: str, answer: Answer) -> None:
        self._bases[replica] = answer

    def answer(self, replica: str, version: str, answer: Answer, tolerance: float) -> list[str]:
        """Record ``replica``'s answer for ``version``; the replicas newly suspect for it."""
        self._answers.setdefault(version, {})[replica] = answer
        answers = self._answers[version]
        stale = {rid for rid, mine in answers.items() if self._stale(rid, version, mine, tolerance)}
        if len(stale) == len(answers):
            self._trim()
            return []  # nobody moved (yet): nothing to tell apart
        new = [rid for rid in sorted(stale) if version not in self._suspect.get(rid, ())]
        for rid in new:
            self._suspect.setdefault(rid, set()).add(version)
            self.alarm = True
        self._trim()
        return new

    def withheld(self, replica: str, version: str) -> bool:
        """``replica`` is not to be routed for ``version``."""
        suspect = self._suspect.get(replica, set())
        return version in suspect and len(suspect) >= self.repeat

    def distrusted(self, replica: str) -> bool:
        """``replica`` has been suspect for ``repeat`` versions (suspicions stay on restart)."""
        return len(self._suspect.get(replica, ())) >= self.repeat

    def compared(self, replica: str, version: str) -> bool:
        """Another replica's answer for ``version`` exists to compare ``replica``'s with."""
        return any(rid != replica for rid in self._answers.get(version, {}))

    def suspicions(self, replica: str) -> int:
        return len(self._suspect.get(replica, ()))

    def _stale(self, replica: str, version: str, mine: Answer, tolerance: float) -> bool:
        earlier: list[Sequence[float]] = [b for b in (self._bases.get(replica),) if b is not None]
        number = version_number(version)
        for other, answers in self._answers.items():
            other_number = version_number(other)
            if number is not None and other_number is not None and other_number < number:
                earlier.extend(answers.values())
        return any(len(e) == len(mine) and gap(mine, e) <= tolerance for e in earlier)

    def _trim(self) -> None:
        while len(self._answers) > self.keep:
            oldest = min(self._answers, key=lambda v: version_number(v) or -1)
            del self._answers[oldest]
        for versions in self._suspect.values():
            while len(versions) > self.keep:
                versions.remove(min(versions, key=lambda v: version_number(v) or -1))
