"""The policy factory: the one module that knows every concrete policy."""

from __future__ import annotations

from proxy.routing.least_loaded import LeastLoaded
from proxy.routing.policy import Policy
from proxy.routing.prefix import PrefixPolicy
from proxy.routing.round_robin import RoundRobin
from proxy.routing.settings import AnyPolicySettings, PrefixSettings, RoundRobinSettings


def build_policy(settings: AnyPolicySettings) -> Policy:
    if isinstance(settings, PrefixSettings):
        return PrefixPolicy(settings)
    if isinstance(settings, RoundRobinSettings):
        return RoundRobin()
    return LeastLoaded()
