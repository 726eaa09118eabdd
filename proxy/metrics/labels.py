"""Metric names' prefix, fixed label sets and bucket bounds.

Label values come from these fixed sets (or from configuration: replica ids), never from request
data; every family with a fixed label set is exported from the start, at 0, so a dashboard or an
alert never points at a series that does not exist yet.
"""

from __future__ import annotations

PREFIX = "rollout_proxy_"
# Fixed label sets, exported from the start (at 0) so dashboards and alerts always find them.
# The reasons of the error table's rows (``proxy.http.errors.ANSWERS``), each used by one or more.
REJECTION_REASONS = (
    "queue_full",
    "queue_timeout",
    "no_replica",
    "too_large",
    "bad_request",
    "unauthorized",
    "unknown_model",
    "upstream_failed",
    "too_many_connections",
    "body_budget",
    "body_timeout",
    "local_resources",
    "unknown_run",
    "run_paused",
    "run_share",
    "admin_disabled",
    "host_not_allowed",
    "unknown_route",
    "wrong_method",
    "unknown_replica",
    "unknown_adapter",
    "not_reported",
    "replica_refused",
    "mount_lagging",
    "upstream_timeout",
    "upload_refused",
)
BAD_INPUT_KINDS = (
    "too_long",
    "bad_method",
    "bad_request_line",
    "bad_target",
    "bad_header",
    "bad_framing",
    "bad_message",
    "other",
)
CONTROL_ACTIONS = ("pause", "resume", "reset_prefix_cache")
# The run's scaler's decisions (``proxy.insight.scaler.ACTIONS``, the same set) and the states
# it counts replicas in (``STATES``).
SCALER_ACTIONS = ("add", "retire", "hold")
SCALER_STATES = ("wanted", "ready", "starting", "draining")
BACKGROUND_TASKS = ("health", "discovery", "watcher", "adapters", "mirror", "advisor", "load")
# Why a replica loaded from the mount instead of a pushed copy (proxy.adapters.push).
PUSH_FALLBACK_CAUSES = ("no_receiver", "refused", "unreachable", "unreadable")
# How the replicas of one fleet sync got the version: all pushed, all from the mount, or both.
SYNC_PATHS = ("push", "mount", "mixed")
# What went wrong (proxy.adapters.mirror.FAILURE_CAUSES): a snapshot not taken, one copy
# attempt failed (retried), a version given up after its attempts, the backlog past its bound
# (nothing dropped), a bucket copy not pruned, the local directory not listed (nothing pruned).
MIRROR_FAILURE_CAUSES = ("snapshot", "copy", "gave_up", "backlog", "prune", "listing")
# Bucket bounds, each named once (the families in proxy.metrics.families refer to them).
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 900)
OVERHEAD_BUCKETS = (
    0.00005,
    0.0001,
    0.00025,
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.5,
)
ADAPTER_ATTEMPT_BUCKETS = (1, 2, 3, 5, 10, 20, 50, 100, 500)
ADAPTER_LOAD_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)
PUSH_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)
MIRROR_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
CONTROL_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)
PAUSE_BUCKETS = (0.1, 0.25, 0.5, 1, 2, 4, 8, 15, 30, 60, 120)
# A sync window with the pause answered is the adapter load alone: tens of milliseconds.
SYNC_WINDOW_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 4, 8, 15, 30, 60, 120)
