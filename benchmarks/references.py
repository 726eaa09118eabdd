"""Which rows of a benchmark's table are the proxy's ``--policy`` choices and which are
references to compare against (an older variant, the published proxy's policy, a model): a
reader must not go looking for ``--policy learned_blocks``. A reference is printed with a ``*``
and the table gets a legend line saying what each one is."""

from __future__ import annotations

import typing
from collections.abc import Iterable

from proxy.routing.settings import AnyPolicySettings

POLICY_CHOICES = tuple(
    settings.model_fields["kind"].default for settings in typing.get_args(AnyPolicySettings)
)
# What each reference is, as its legend says it.
REFERENCES = {
    "prefix_requests": "prefix seeing request counts only",
    "least_cost": "least_loaded seeing costs and /metrics",
    "learned_blocks": "the published proxy's policy, reimplemented",
    "steady_state": "the steady-state reference, no policy",
}


def marked(policy: str) -> str:
    """The name as a table prints it: a ``*`` on each that is no ``--policy`` choice."""
    return policy if policy in POLICY_CHOICES else policy + "*"


def legend(policies: Iterable[str]) -> str:
    """One line naming the references among ``policies``; empty when there are none."""
    refs = [p for p in dict.fromkeys(policies) if p not in POLICY_CHOICES]
    if not refs:
        return ""
    said = ", ".join(f"{p} ({REFERENCES.get(p, 'a reference')})" for p in refs)
    return f"* a reference, not a --policy choice of the proxy: {said}"
