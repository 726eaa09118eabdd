"""What is running, where operators look: ``/proxy/status``'s ``version`` and the build-info gauge
exporters carry; and an idle ``/metrics`` without prometheus_client's ``_created`` series."""

from __future__ import annotations

import platform

from prometheus_client.parser import text_string_to_metric_families

from proxy import __version__
from tests.support.calls import metrics_text
from tests.support.fleet import run_stack


async def test_status_and_metrics_say_the_version_and_carry_no_created_series() -> None:
    async with run_stack(1) as stack:
        async with stack.session.get(stack.proxy_url + "/proxy/status") as resp:
            assert resp.status == 200
            assert (await resp.json())["version"] == __version__
        text = await metrics_text(stack)
    samples = [s for family in text_string_to_metric_families(text) for s in family.samples]
    build = [s for s in samples if s.name == "rollout_proxy_build_info"]
    assert len(build) == 1, build
    assert build[0].labels == {"version": __version__, "python": platform.python_version()}
    assert build[0].value == 1
    created = sorted({s.name for s in samples if s.name.endswith("_created")})
    assert not created, created
