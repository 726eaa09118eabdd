"""What a run's share of ``max_loras`` lets TRL do, in words (pure).

TRL's async GRPO needs ``max_staleness + 2`` adapters on its server (``max_staleness + 1``
versions a request may still name, and one being loaded); a run's server is its share of each
replica's ``max_loras`` (``Runs.share``), which its ``/runs/<run>/server_info`` reports. The
proxy cannot know a run's ``max_staleness``, so it says the share and the rule: a run whose
share is below what TRL's default ``max_staleness`` needs is named with what it allows and what
to change (fewer runs, more ``max_loras`` on the replicas, or a larger weight).
"""

from __future__ import annotations

from proxy.runs.table import Runs

TRL_MAX_STALENESS = 4  # TRL's default (AsyncGRPOConfig.max_staleness)
NEEDED = TRL_MAX_STALENESS + 2


def share_line(runs: Runs, name: str, max_loras: int) -> tuple[bool, str]:
    """(short, line): ``name``'s share of ``max_loras`` and what it allows; ``short`` when it
    is below what TRL's default needs (a WARNING and a status warning), else an INFO line."""
    share = runs.share(name, max_loras)
    weight, total = runs.get(name).weight, sum(runs.weights().values())
    head = (
        f"run {name} gets max_loras {share} (its share of the replicas' {max_loras}, weight "
        f"{weight:g} of {total:g}); TRL needs max_staleness + 2"
    )
    if share >= NEEDED:
        return False, f"{head}: it allows max_staleness up to {share - 2}"
    allows = "no max_staleness fits" if share < 2 else f"max_staleness {share - 2} at most"
    return True, (
        f"{head}, so {allows}; TRL's default max_staleness ({TRL_MAX_STALENESS}) needs "
        f"{NEEDED}: give the replicas max_loras {_enough(runs, name)}, declare fewer runs, "
        "or raise its weight"
    )


def _enough(runs: Runs, name: str) -> int:
    """The smallest per-replica ``max_loras`` that gives ``name`` a share of ``NEEDED``."""
    weight, total = runs.get(name).weight, sum(runs.weights().values())
    need = max(NEEDED, int(NEEDED * total / weight) - 1)
    while runs.share(name, need) < NEEDED:
        need += 1
    return need
