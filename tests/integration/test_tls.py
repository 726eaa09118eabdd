"""https:// upstreams with a configurable CA bundle, against a local self-signed server."""

from __future__ import annotations

from pathlib import Path

import aiohttp

from proxy.app import build_app
from proxy.app import serve as serve_proxy
from proxy.config import Settings
from replica_entry.sim import SimSettings, build_sim_app
from tests.support.calls import completion
from tests.support.certs import server_context
from tests.support.fleet import FAST_HEALTH
from tests.support.servers import serve
from tests.support.waiting import eventually


async def test_https_replica_with_ca_bundle(tmp_path: Path) -> None:
    server_ctx, cert = server_context(tmp_path)
    async with serve(build_sim_app(SimSettings()), ssl_context=server_ctx) as replica_url:
        assert replica_url.startswith("https://")
        trusted = Settings.model_validate(
            {"replicas": [replica_url], "ca_bundle": str(cert), **FAST_HEALTH}
        )
        untrusted = Settings.model_validate({"replicas": [replica_url], **FAST_HEALTH})
        async with (
            serve_proxy(build_app(trusted)) as good_url,
            serve_proxy(build_app(untrusted)) as bad_url,
            aiohttp.ClientSession() as session,
        ):

            async def healthy(url: str) -> bool:
                async with session.get(url + "/health") as resp:
                    return resp.status == 200

            await eventually(lambda: healthy(good_url), what="the TLS replica admitted")
            async with session.post(good_url + "/v1/completions", json=completion()) as resp:
                assert resp.status == 200
            # Without the CA bundle the self-signed replica is never trusted, never admitted.
            assert not await healthy(bad_url)
