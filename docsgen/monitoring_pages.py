"""The monitoring reference: the Prometheus alerts and the Grafana dashboard's panels, read from
the files a user deploys (``monitoring/prometheus/alerts.yml``, ``monitoring/grafana/
rollout-proxy.json``), each alert with its expression and what it says, each panel with its
queries."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from docsgen.cli_pages import cell, code

ROOT = Path(__file__).resolve().parents[1]
ALERTS = ROOT / "monitoring" / "prometheus" / "alerts.yml"
DASHBOARD = ROOT / "monitoring" / "grafana" / "rollout-proxy.json"


def alerts() -> list[dict[str, Any]]:
    rules: list[dict[str, Any]] = []
    for group in yaml.safe_load(ALERTS.read_text())["groups"]:
        rules += [rule for rule in group["rules"] if "alert" in rule]
    return rules


def alert_table() -> str:
    lines = [
        "| alert | severity | for | fires on | says |",
        "|---|---|---|---|---|",
    ]
    for rule in alerts():
        notes = rule.get("annotations", {})
        said = " ".join(filter(None, (notes.get("summary"), notes.get("description"))))
        severity = rule.get("labels", {}).get("severity", "")
        lines.append(
            f"| `{rule['alert']}` | {severity} | {rule.get('for', '-')} | "
            f"{code(' '.join(rule['expr'].split()))} | {cell(said)} |"
        )
    return "\n".join(lines)


def panel_list() -> str:
    dashboard = json.loads(DASHBOARD.read_text())
    lines = [f"Dashboard **{dashboard['title']}** (uid `{dashboard['uid']}`):\n"]
    for panel in dashboard["panels"]:
        if panel.get("type") == "row":
            lines.append(f"\n**{panel['title']}**\n")
            continue
        queries = "; ".join(
            code(" ".join(target["expr"].split()))
            for target in panel.get("targets", [])
            if "expr" in target
        )
        lines.append(f"- {cell(panel['title'])}: {queries}")
    return "\n".join(lines)


def render() -> str:
    return "\n".join(
        [
            "# Monitoring\n",
            "The alert rules and the dashboard under `monitoring/`, as the files hold them "
            "([Operations](../operations.md#dashboards-and-alerts) says how to use them).\n",
            "!!! note\n    Generated from `monitoring/prometheus/alerts.yml` and "
            "`monitoring/grafana/rollout-proxy.json` when the site is built "
            "(`docsgen/monitoring_pages.py`).\n",
            "## Alerts\n",
            alert_table() + "\n",
            "## The dashboard's panels\n",
            panel_list() + "\n",
        ]
    )
