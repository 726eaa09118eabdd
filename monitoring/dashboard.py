"""Builds ``grafana/rollout-proxy.json`` (the importable dashboard) from the panel list below.

    python monitoring/dashboard.py            # rewrite the JSON
    python monitoring/dashboard.py --check    # exit 1 if the JSON is not what this builds

One place for the queries: ``tests/monitoring`` evaluates every one of them against a real
Prometheus scraping a live proxy. Grafana variables: ``$datasource`` (a Prometheus data source),
``$replica`` (regex over replica ids), ``$__rate_interval``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

OUT = Path(__file__).parent / "grafana" / "rollout-proxy.json"
RI = "$__rate_interval"
R = 'replica=~"$replica"'

# (title, unit, [(legend, expr), ...]) per panel, in rows.
ROWS: list[tuple[str, list[tuple[str, str, list[tuple[str, str]]]]]] = [
    (
        "Traffic",
        [
            ("Requests per second, by route", "reqps", [
                ("{{route}}", f"sum by (route) (rate(rollout_proxy_requests_total[{RI}]))"),
            ]),
            ("Errors and refusals per second", "reqps", [
                ("{{status}}", f'sum by (status) (rate(rollout_proxy_requests_total{{status=~"[45].."}}[{RI}]))'),
                ("refused: {{reason}}", f"sum by (reason) (rate(rollout_proxy_rejections_total[{RI}]))"),
            ]),
            ("Completion latency", "s", [
                ("p50", f'histogram_quantile(0.5, sum by (le) (rate(rollout_proxy_request_duration_seconds_bucket{{route="completions"}}[{RI}])))'),
                ("p99", f'histogram_quantile(0.99, sum by (le) (rate(rollout_proxy_request_duration_seconds_bucket{{route="completions"}}[{RI}])))'),
            ]),
            ("Time in the proxy (p99)", "s", [
                ("{{route}}", f"histogram_quantile(0.99, sum by (le, route) (rate(rollout_proxy_overhead_seconds_bucket[{RI}])))"),
            ]),
        ],
    ),
    (
        "Capacity",
        [
            ("In flight and waiting", "short", [
                ("in flight", "rollout_proxy_inflight"),
                ("cap", "rollout_proxy_max_inflight"),
                ("queued", "rollout_proxy_queue_depth"),
                ("queue limit", "rollout_proxy_queue_limit"),
            ]),
            ("In flight by replica", "short", [
                ("{{replica}}", f"rollout_proxy_replica_inflight{{{R}}}"),
            ]),
            ("Requests per second by replica (load spread)", "reqps", [
                ("{{replica}}", f"sum by (replica) (rate(rollout_proxy_replica_requests_total{{{R}}}[{RI}]))"),
            ]),
            ("In flight by adapter version", "short", [
                ("{{version}}", "rollout_proxy_inflight_by_version"),
            ]),
            ("What the replicas report: waiting requests", "short", [
                ("{{replica}}", f'rollout_proxy_replica_reported{{kind="waiting",{R}}}'),
            ]),
            ("What the replicas report: KV cache usage", "percentunit", [
                ("{{replica}}", f'rollout_proxy_replica_reported{{kind="kv_usage",{R}}}'),
            ]),
            ("Estimated work in flight (decode-token equivalents)", "short", [
                ("{{replica}}", f"rollout_proxy_replica_cost{{{R}}}"),
            ]),
            ("Load scrapes of the replicas' /metrics", "short", [
                ("{{outcome}}", f"sum by (outcome) (increase(rollout_proxy_load_scrapes_total[{RI}]))"),
            ]),
        ],
    ),
    (
        "Routing quality",
        [
            ("Prefix-cache hit ratio", "percentunit", [
                ("fleet", f'sum(rate(rollout_proxy_tokens_total{{kind="cached"}}[{RI}])) / sum(rate(rollout_proxy_tokens_total{{kind="prompt"}}[{RI}]))'),
                ("{{replica}}", f'sum by (replica) (rate(rollout_proxy_replica_tokens_total{{kind="cached",{R}}}[{RI}])) / sum by (replica) (rate(rollout_proxy_replica_tokens_total{{kind="prompt",{R}}}[{RI}]))'),
            ]),
            ("Reuse available vs captured", "percentunit", [
                ("available", f'sum(rate(rollout_proxy_reuse_tokens_total{{kind="available"}}[{RI}])) / sum(rate(rollout_proxy_reuse_tokens_total{{kind="prompt"}}[{RI}]))'),
                ("affinity efficiency", f'(sum(rate(rollout_proxy_tokens_total{{kind="cached"}}[{RI}])) / sum(rate(rollout_proxy_tokens_total{{kind="prompt"}}[{RI}]))) / (sum(rate(rollout_proxy_reuse_tokens_total{{kind="available"}}[{RI}])) / sum(rate(rollout_proxy_reuse_tokens_total{{kind="prompt"}}[{RI}])))'),
            ]),
            ("Routing decisions", "reqps", [
                ("{{reason}}", f"sum by (reason) (rate(rollout_proxy_routing_decisions_total[{RI}]))"),
            ]),
            ("Waste: share of rollout tokens answered after their version left the window (TRL drops them)", "percentunit", [
                ("run {{run}}", f"sum by (run) (rate(rollout_proxy_stale_tokens_total[{RI}])) / sum by (run) (rate(rollout_proxy_rollout_tokens_total[{RI}]))"),
            ]),
        ],
    ),
    (
        "Replicas",
        [
            ("Replicas by state", "short", [("{{state}}", "rollout_proxy_replicas")]),
            ("Routable (1) per replica", "short", [("{{replica}}", f"rollout_proxy_replica_healthy{{{R}}}")]),
            ("Ejections by cause", "short", [
                ("{{cause}}", f"sum by (cause) (increase(rollout_proxy_ejections_total[{RI}]))"),
            ]),
            ("Replica errors by kind", "short", [
                ("{{replica}} {{kind}}", f"sum by (replica, kind) (increase(rollout_proxy_replica_errors_total{{{R}}}[{RI}]))"),
            ]),
        ],
    ),
    (
        "Weight syncs",
        [
            ("Share of time the fleet is paused", "percentunit", [
                ("paused", f"rate(rollout_proxy_paused_seconds_total[{RI}])"),
            ]),
            ("Sync window (pause to resume; frozen only with --forward-pause)", "s", [
                ("p50", f"histogram_quantile(0.5, sum by (le) (rate(rollout_proxy_sync_window_seconds_bucket[{RI}])))"),
                ("p99", f"histogram_quantile(0.99, sum by (le) (rate(rollout_proxy_sync_window_seconds_bucket[{RI}])))"),
                ("frozen p50", f"histogram_quantile(0.5, sum by (le) (rate(rollout_proxy_sync_paused_seconds_bucket[{RI}])))"),
            ]),
            ("Sync parts (p50)", "s", [
                ("{{action}}", f"histogram_quantile(0.5, sum by (le, action) (rate(rollout_proxy_control_seconds_bucket[{RI}])))"),
                ("load on every replica", f'histogram_quantile(0.5, sum by (le) (rate(rollout_proxy_adapter_fleet_load_seconds_bucket{{outcome="ok"}}[{RI}])))'),
            ]),
            ("Adapter versions", "short", [("{{kind}}", "rollout_proxy_adapter_versions")]),
            ("Fleet sync time by path (p50)", "s", [
                ("{{path}}", f"histogram_quantile(0.5, sum by (le, path) (rate(rollout_proxy_adapter_fleet_sync_seconds_bucket[{RI}])))"),
            ]),
            ("Adapter push: bytes per second and fallbacks to the mount", "short", [
                ("{{replica}} bytes/s", f"sum by (replica) (rate(rollout_proxy_adapter_push_bytes_total{{{R}}}[{RI}]))"),
                ("fallback: {{cause}}", f"sum by (cause) (increase(rollout_proxy_adapter_push_fallbacks_total[{RI}]))"),
            ]),
            ("Adapter push time per replica (p50)", "s", [
                ("{{replica}}", f"histogram_quantile(0.5, sum by (le, replica) (rate(rollout_proxy_adapter_push_seconds_bucket{{{R}}}[{RI}])))"),
            ]),
            ("Served policy: the alarm, and versions withheld per replica", "short", [
                ("alarm", "rollout_proxy_policy_alarm"),
                ("{{replica}} withheld", f"sum by (replica) (increase(rollout_proxy_policy_mismatch_total{{{R}}}[{RI}]))"),
            ]),
            ("Served-policy probe, and what a version's first requests wait for it (p50)", "s", [
                ("probe", f"histogram_quantile(0.5, sum by (le) (rate(rollout_proxy_probe_seconds_bucket[{RI}])))"),
                ("first requests wait", f"histogram_quantile(0.5, sum by (le) (rate(rollout_proxy_policy_wait_seconds_bucket[{RI}])))"),
            ]),
        ],
    ),
    (
        "The proxy itself",
        [
            ("Restarts, background errors, bad client requests", "short", [
                ("restarts", "rollout_proxy_restarts_total"),
                ("{{task}} errors", f"sum by (task) (increase(rollout_proxy_background_errors_total[{RI}]))"),
                ("bad requests: {{kind}}", f"sum by (kind) (increase(rollout_proxy_bad_client_requests_total[{RI}]))"),
            ]),
            ("Failovers per second", "reqps", [
                ("failovers", f"rate(rollout_proxy_failovers_total[{RI}])"),
            ]),
        ],
    ),
]  # fmt: skip


DATASOURCE = {
    "name": "datasource",
    "type": "datasource",
    "query": "prometheus",
    "label": "Prometheus",
}
REPLICA = {
    "name": "replica",
    "type": "query",
    "label": "replica",
    "datasource": {"type": "prometheus", "uid": "${datasource}"},
    "query": {"query": "label_values(rollout_proxy_replica_healthy, replica)", "refId": "replica"},
    "definition": "label_values(rollout_proxy_replica_healthy, replica)",
    "includeAll": True,
    "multi": True,
    "allValue": ".*",
    "refresh": 2,
}


def _panel(pid: int, x: int, y: int, title: str, unit: str, targets: list[tuple[str, str]]) -> Any:
    return {
        "id": pid,
        "type": "timeseries",
        "title": title,
        "datasource": {"type": "prometheus", "uid": "${datasource}"},
        "gridPos": {"h": 8, "w": 12, "x": x, "y": y},
        "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
        "options": {"legend": {"displayMode": "list", "placement": "bottom"}},
        "targets": [
            {
                "refId": chr(ord("A") + i),
                "datasource": {"type": "prometheus", "uid": "${datasource}"},
                "expr": expr,
                "legendFormat": legend,
            }
            for i, (legend, expr) in enumerate(targets)
        ],
    }


def build() -> dict[str, Any]:
    panels: list[Any] = []
    y, pid = 0, 1
    for row_title, row_panels in ROWS:
        panels.append({"id": pid, "type": "row", "title": row_title, "collapsed": False,
                       "gridPos": {"h": 1, "w": 24, "x": 0, "y": y}, "panels": []})  # fmt: skip
        pid, y = pid + 1, y + 1
        for i, (title, unit, targets) in enumerate(row_panels):
            panels.append(_panel(pid, 12 * (i % 2), y + 8 * (i // 2), title, unit, targets))
            pid += 1
        y += 8 * ((len(row_panels) + 1) // 2)
    return {
        "title": "rollout-proxy",
        "uid": "rollout-proxy",
        "tags": ["rollout-proxy", "vllm", "trl"],
        "schemaVersion": 39,
        "version": 1,
        "editable": True,
        "time": {"from": "now-1h", "to": "now"},
        "refresh": "30s",
        "templating": {"list": [DATASOURCE, REPLICA]},
        "panels": panels,
    }


def expressions(dashboard: dict[str, Any]) -> list[str]:
    """Every query of the dashboard, for the tests."""
    return [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]


def render() -> str:
    return json.dumps(build(), indent=2) + "\n"


def main(argv: list[str]) -> int:
    if "--check" in argv:
        if OUT.read_text() != render():
            print(f"{OUT} is out of date: run python monitoring/dashboard.py", file=sys.stderr)
            return 1
        return 0
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(render())
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
