"""The dashboard and the alerts against a real Prometheus (Debian's package: ``make
monitoring-tools``) scraping a live proxy with simulated replicas through traffic, a weight
sync and an ejection. Every dashboard query returns data; every alert expression parses and,
without its final comparison, returns data; promtool checks the rules and runs their unit
tests (each alert firing on the series that should fire it and quiet otherwise)."""

from __future__ import annotations

import asyncio
import re
import shutil
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml

from monitoring import dashboard  # the one list of the dashboard's queries
from tests.support.adapters import write_adapter
from tests.support.calls import completion, load, load_body, post
from tests.support.fleet import Stack, run_stack
from tests.support.servers import free_port
from tests.support.waiting import eventually

ROOT = Path(__file__).resolve().parents[2]
MONITORING = ROOT / "monitoring"

pytestmark = pytest.mark.skipif(
    shutil.which("prometheus") is None or shutil.which("promtool") is None,
    reason="prometheus is not installed here (make test-tools installs Debian's package)",
)
GRAFANA_VARIABLES = {"$__rate_interval": "1m", "$replica": ".*"}
FINAL_COMPARISON = re.compile(r"\s*(==|!=|>=|<=|>|<)\s*[0-9.]+\s*$")


def substitute(expr: str) -> str:
    for name, value in GRAFANA_VARIABLES.items():
        expr = expr.replace(name, value)
    return expr


@asynccontextmanager
async def prometheus(target: str, tmp: Path) -> AsyncIterator[str]:
    port = free_port()
    config = tmp / "prometheus.yml"
    config.write_text(
        yaml.safe_dump(
            {
                "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
                "scrape_configs": [
                    {"job_name": "rollout-proxy", "static_configs": [{"targets": [target]}]}
                ],
            }
        )
    )
    process = await asyncio.create_subprocess_exec(
        "prometheus",
        f"--config.file={config}",
        f"--storage.tsdb.path={tmp / 'data'}",
        f"--web.listen-address=127.0.0.1:{port}",
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        process.terminate()
        await asyncio.wait_for(process.wait(), 30)


async def query(session: aiohttp.ClientSession, base: str, expr: str) -> list[Any]:
    async with session.get(base + "/api/v1/query", params={"query": expr}) as resp:
        answer = await resp.json()
    assert answer.get("status") == "success", (expr, answer)
    result: list[Any] = answer["data"]["result"]
    return result


async def traffic(stack: Stack, tmp: Path, rounds: int) -> None:
    """Groups of rollouts over distinct prompts (cache hits, sampled reuse), a bad request."""
    for r in range(rounds):
        for group in range(24):
            prompt = [group + 7 * r] * 48 + list(range(group * 64, group * 64 + 32))
            await asyncio.gather(
                *(post(stack, "/v1/completions", completion(prompt=prompt)) for _ in range(4))
            )
    status, _, _ = await post(stack, "/v1/completions", b"{not json")
    assert status == 400


async def weight_sync(stack: Stack, tmp: Path, version: int) -> None:
    name = f"trl-policy-v{version}"
    assert (await post(stack, "/pause?mode=keep", None))[0] == 200
    assert (await load(stack, load_body(name, write_adapter(tmp, name))))[0] == 200
    assert (await post(stack, "/resume", None))[0] == 200


async def test_every_dashboard_query_and_alert_expression_against_real_prometheus(
    tmp_path: Path,
) -> None:
    async with (
        run_stack(3, health_interval=0.2) as stack,
        prometheus(stack.proxy_url.removeprefix("http://"), tmp_path) as base,
        aiohttp.ClientSession() as session,
    ):

        async def scraped() -> bool:
            try:
                return bool(await query(session, base, "rollout_proxy_inflight"))
            except (aiohttp.ClientConnectionError, aiohttp.ContentTypeError):
                return False  # Prometheus is still starting (refused, or 503 while it loads)

        await eventually(scraped, timeout=30, what="Prometheus to scrape the proxy")
        await traffic(stack, tmp_path, rounds=2)
        await weight_sync(stack, tmp_path, 1)
        await stack.sims[2].stop()  # an ejection: requests routed there fail over first
        await traffic(stack, tmp_path, rounds=1)
        await weight_sync(stack, tmp_path, 2)
        await asyncio.sleep(3)  # a few more scrapes after the last event (rates need two)

        empty = []
        for expr in dashboard.expressions(dashboard.build()):
            if not await query(session, base, substitute(expr)):
                empty.append(expr)
        assert empty == [], f"dashboard queries without data: {empty}"

        rules = yaml.safe_load((MONITORING / "prometheus" / "alerts.yml").read_text())
        for rule in rules["groups"][0]["rules"]:
            await query(session, base, rule["expr"])  # parses (a parse error is status error)
            bare = FINAL_COMPARISON.sub("", rule["expr"].strip())
            assert bare != rule["expr"].strip(), rule["alert"]
            assert await query(session, base, bare), f"{rule['alert']}: no data for {bare}"


def test_promtool_checks_the_rules_and_runs_their_unit_tests() -> None:
    rules = MONITORING / "prometheus"
    check = subprocess.run(
        ["promtool", "check", "rules", str(rules / "alerts.yml")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert check.returncode == 0, check.stdout + check.stderr
    tests = subprocess.run(
        ["promtool", "test", "rules", "alerts_test.yml"],
        capture_output=True,
        text=True,
        cwd=rules,
        check=False,
    )
    assert tests.returncode == 0, tests.stdout + tests.stderr
    config = subprocess.run(
        ["promtool", "check", "config", str(rules / "prometheus.yml")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert config.returncode == 0, config.stdout + config.stderr


def test_the_dashboard_json_is_what_the_generator_builds() -> None:
    assert (
        subprocess.run(
            [sys.executable, str(MONITORING / "dashboard.py"), "--check"], check=False
        ).returncode
        == 0
    )
