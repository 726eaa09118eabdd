"""The metrics reference: every family ``/metrics`` exports, read off an idle proxy.

A proxy is built and started as ``rollout-proxy`` builds it (``proxy.app.build_app``: every
room, one replica that is never reached, one declared run, no listening socket), its page
collected once, and stopped. A family's labels are what it declares (the scrape-time families'
own label names, the recorder's table ``proxy.metrics.families.FAMILIES``) and what its samples
carry; its type and help are the exported ones. So a family added anywhere is listed here the
next time the site is built.
"""

from __future__ import annotations

import asyncio
import logging
import tempfile
from dataclasses import dataclass
from pathlib import Path

from docsgen.cli_pages import cell, code

# The suffix each type's samples carry in the text format (prometheus_client's family names
# omit it): what a user greps /metrics for.
SAMPLE_SUFFIX = {"counter": "_total", "info": "_info"}
# The type the text format writes for a family's type (prometheus_client's generate_latest).
EXPOSED_TYPE = {"info": "gauge", "stateset": "gauge", "gaugehistogram": "histogram"}
_NOT_LABELS = {"le", "quantile"}


@dataclass(frozen=True)
class FamilyRow:
    name: str  # as scraped: a counter with its _total
    type: str  # as the text format writes it
    help: str
    labels: tuple[str, ...]

    def markdown(self) -> str:
        labels = ", ".join(code(label) for label in self.labels)
        return f"| {code(self.name)} | {self.type} | {labels} | {cell(self.help)} |"


async def _collect(store: Path) -> list[FamilyRow]:
    from aiohttp import web

    from proxy.app import PROXY, build_app
    from proxy.config import Settings
    from proxy.metrics.families import FAMILIES
    from proxy.metrics.labels import PREFIX

    declared = {PREFIX + family.name: family.labels for family in FAMILIES}
    settings = Settings.model_validate(
        {"replicas": ["http://127.0.0.1:9"], "runs": "run", "port": 0, "adapter_store": str(store)}
    )
    app = build_app(settings)
    runner = web.AppRunner(app, handle_signals=False)
    await runner.setup()
    try:
        rows = []
        for metric in app[PROXY].page.collect():
            labels: dict[str, None] = dict.fromkeys(declared.get(metric.name, ()))
            labels.update(dict.fromkeys(getattr(metric, "_labelnames", ())))
            for sample in metric.samples:
                labels.update(dict.fromkeys(k for k in sample.labels if k not in _NOT_LABELS))
            name = metric.name + SAMPLE_SUFFIX.get(metric.type, "")
            shown = EXPOSED_TYPE.get(metric.type, metric.type)
            rows.append(FamilyRow(name, shown, metric.documentation, tuple(labels)))
        return rows
    finally:
        await runner.cleanup()


def families() -> list[FamilyRow]:
    """Every exported family, in the page's order (the proxy's log kept quiet meanwhile)."""
    quiet = logging.getLogger("proxy")
    level = quiet.level
    quiet.setLevel(logging.CRITICAL)
    try:
        with tempfile.TemporaryDirectory(prefix="docsgen-") as tmp:
            return asyncio.run(_collect(Path(tmp) / "store"))
    finally:
        quiet.setLevel(level)


def render() -> str:
    rows = families()
    lines = [
        "# Metrics\n",
        f"Every metric family `GET /metrics` exports: {len(rows)} families, each name prefixed "
        "`rollout_proxy_`. The label values each label takes, and what the families mean "
        "together, are in [Operations](../operations.md#metrics).\n",
        "!!! note\n    Generated from the code when the site is built "
        "(`docsgen/metric_pages.py`): an idle proxy is started and its page collected.\n",
        "| family | type | labels | help |",
        "|---|---|---|---|",
        *(row.markdown() for row in rows),
        "",
    ]
    return "\n".join(lines)
