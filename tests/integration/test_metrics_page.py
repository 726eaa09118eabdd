"""The /metrics page before any traffic: every family with a fixed label set is there from the
start (counters at 0), so a dashboard or an alert never points at a family that does not exist
yet; no family is exported twice."""

from __future__ import annotations

from collections import Counter

from prometheus_client.parser import text_string_to_metric_families

from proxy.fleet.pool import EJECT_CAUSES
from proxy.insight.advisor import VERDICTS
from proxy.metrics.labels import (
    BACKGROUND_TASKS,
    BAD_INPUT_KINDS,
    CONTROL_ACTIONS,
    REJECTION_REASONS,
)
from tests.support.calls import metrics_text
from tests.support.fleet import run_stack

FIXED = {
    "rollout_proxy_rejections": ("reason", REJECTION_REASONS),
    "rollout_proxy_ejections": ("cause", EJECT_CAUSES),
    "rollout_proxy_bad_client_requests": ("kind", BAD_INPUT_KINDS),
    "rollout_proxy_background_errors": ("task", BACKGROUND_TASKS),
    "rollout_proxy_control_seconds": ("action", CONTROL_ACTIONS),
    "rollout_proxy_advice": ("verdict", VERDICTS),
    "rollout_proxy_tokens": ("kind", ("prompt", "cached")),
    "rollout_proxy_reuse_tokens": ("kind", ("prompt", "available")),
    "rollout_proxy_inflight_by_version": ("version", ("base", "other")),
}
UNLABELLED = (
    "rollout_proxy_inflight",
    "rollout_proxy_max_inflight",
    "rollout_proxy_queue_depth",
    "rollout_proxy_queue_limit",
    "rollout_proxy_paused_seconds",
    "rollout_proxy_failovers",
    "rollout_proxy_restarts",
    "rollout_proxy_sync_paused_seconds",
    "rollout_proxy_reconciliations",
)


async def test_every_fixed_family_is_exported_from_the_start_and_only_once() -> None:
    async with run_stack(2) as stack:
        text = await metrics_text(stack)
    families = list(text_string_to_metric_families(text))
    twice = [name for name, n in Counter(f.name for f in families).items() if n > 1]
    assert twice == []
    by_name = {f.name: f for f in families}
    for name, (label, values) in FIXED.items():
        assert name in by_name, name
        seen = {s.labels.get(label) for s in by_name[name].samples}
        assert set(values) <= seen, (name, set(values) - seen)
    for name in UNLABELLED:
        assert name in by_name, name
