"""The docs' "Admin API" (docs/proxy/api.md) and "Metrics" (docs/operations.md) tables against a
real running proxy: every admin route its router serves is documented and nothing else, every
metric family it exports is in the table and every row names one it exports (a newcomer reads
the docs, not the code)."""

from __future__ import annotations

import re

from proxy.app import PROXY
from tests.support.docs import section, table_first_cells
from tests.support.fleet import run_stack

PREFIX = "rollout_proxy_"


def documented_admin_routes() -> set[str]:
    """``METHOD /path`` of each row of the Admin API table, ``{id}`` as the router's ``{rid}``."""
    routes = set()
    for cell in table_first_cells(section("docs/proxy/api.md", "Admin API")):
        found = re.fullmatch(r"`([A-Z]+) (/admin/\S*)`", cell)
        if found:
            routes.add(f"{found[1]} {found[2].replace('{id}', '{rid}')}")
    return routes


# The suffix a family's samples carry in the text format (prometheus_client's family names omit
# it): what a user greps /metrics for, and what the docs write.
SAMPLE_SUFFIX = {"counter": "_total", "info": "_info"}


def documented_families() -> set[str]:
    """The names the Metrics table gives, as written (a counter with its ``_total``)."""
    names = set()
    for cell in table_first_cells(section("docs/operations.md", "Metrics")):
        names.update(re.findall(rf"`({PREFIX}\w+)`", cell))
    return names


async def test_every_admin_route_is_documented_and_no_other() -> None:
    async with run_stack(1) as stack:
        served = {
            f"{route.method} {route.resource.canonical}"
            for route in stack.proxy_app.router.routes()
            if route.resource is not None
            and route.resource.canonical.startswith("/admin")
            and route.method != "HEAD"  # aiohttp's own companion of each GET
        }
    assert served, "the app serves no /admin route: the walk is wrong"
    documented = documented_admin_routes()
    assert served - documented == set(), "served but not in the docs' Admin API table"
    assert documented - served == set(), "in the docs' Admin API table but not served"


async def test_every_exported_family_is_in_the_metrics_table_and_no_other() -> None:
    async with run_stack(2) as stack:
        exported = {
            m.name + SAMPLE_SUFFIX.get(m.type, "") for m in stack.proxy_app[PROXY].page.collect()
        }
    assert len(exported) > 20 and all(name.startswith(PREFIX) for name in exported)
    documented = documented_families()
    assert exported - documented == set(), "exported but not in the docs' Metrics table"
    assert documented - exported == set(), "in the docs' Metrics table but not exported"
