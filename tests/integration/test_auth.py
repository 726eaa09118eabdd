"""Auth both ways, and secrets absent from every output."""

from __future__ import annotations

import logging
from pathlib import Path

import orjson
import pytest

from tests.support.adapters import write_adapter
from tests.support.calls import completion, post, records
from tests.support.fleet import run_stack
from tests.support.waiting import wait_for

UPSTREAM = "hf_upstream_TOKEN_1234567890"
CLIENT_KEY = "client-KEY-abcdef"


async def test_upstream_token_is_added_and_client_authorization_is_not_forwarded() -> None:
    async with run_stack(2, sim={"api_key": UPSTREAM}, upstream_token=UPSTREAM) as stack:
        status, _, _ = await post(stack, "/v1/completions", completion())
        assert status == 200
        status, _, _ = await post(
            stack, "/v1/completions", completion(), headers={"Authorization": "Bearer other"}
        )
        assert status == 200
        seen = [r for i in range(2) for r in await records(stack, i) if r["path"].startswith("/v1")]
        assert seen and all(r["authorized"] is True for r in seen)


async def test_without_upstream_token_the_replica_is_not_admitted() -> None:
    async with run_stack(1, sim={"api_key": UPSTREAM}, ready=False, queue_timeout=0.1) as stack:
        replica = next(iter(stack.pool))
        await wait_for(lambda: "401" in replica.last_error, what="admission refused")
        async with stack.session.get(stack.proxy_url + "/health") as resp:
            assert resp.status == 503
            body = await resp.json()
        assert "--upstream-token" in body["down"][replica.id]["error"]
        # The client's own Authorization header is never forwarded, even when it is the key.
        status, _, _ = await post(
            stack,
            "/v1/completions",
            completion(),
            headers={"Authorization": f"Bearer {UPSTREAM}"},
        )
        assert status == 503


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"Authorization": "Bearer wrong"},
        {"Authorization": CLIENT_KEY},
        {"X-API-Key": CLIENT_KEY},
        {"Authorization": f"Basic {CLIENT_KEY}"},
    ],
)
async def test_inbound_key_required_everywhere_but_health(headers: dict[str, str]) -> None:
    async with run_stack(1, api_key=CLIENT_KEY) as stack:
        for method, path in [
            ("POST", "/v1/completions"),
            ("GET", "/v1/models"),
            ("GET", "/server_info"),
            ("POST", "/pause"),
            ("GET", "/metrics"),
            ("GET", "/proxy/status"),
        ]:
            async with stack.session.request(
                method, stack.proxy_url + path, data=orjson.dumps(completion()), headers=headers
            ) as resp:
                assert resp.status == 401, path
        async with stack.session.get(stack.proxy_url + "/health", headers=headers) as resp:
            assert resp.status == 200
        good = {"Authorization": f"Bearer {CLIENT_KEY}"}
        assert (await post(stack, "/v1/completions", completion(), headers=good))[0] == 200


async def test_secrets_never_appear_in_outputs(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    auth = {"Authorization": f"Bearer {CLIENT_KEY}"}
    async with run_stack(
        2,
        sim={"api_key": UPSTREAM},
        upstream_token=UPSTREAM,
        api_key=CLIENT_KEY,
        admin_key="ADMIN-key-xyz",
        adapter_load_deadline=0.2,
    ) as stack:
        outputs: list[bytes] = []
        # A replica error that echoes the secret-bearing path must come back scrubbed.
        secret_dir = tmp_path / UPSTREAM
        status, body, _ = await post(
            stack,
            "/v1/load_lora_adapter",
            {"lora_name": "x", "lora_path": str(secret_dir)},
            headers=auth,
        )
        assert status == 504
        outputs.append(body)
        path = write_adapter(tmp_path, "ok-adapter")
        body_ok = {"lora_name": "ok", "lora_path": str(path)}
        outputs.append((await post(stack, "/v1/load_lora_adapter", body_ok, headers=auth))[1])
        outputs.append((await post(stack, "/v1/completions", b"{bad", headers=auth))[1])
        outputs.append((await post(stack, "/v1/completions", completion(), headers=auth))[1])
        for path_ in ("/metrics", "/proxy/status", "/v1/models", "/server_info", "/health"):
            async with stack.session.get(stack.proxy_url + path_, headers=auth) as resp:
                outputs.append(await resp.read())
        await stack.sims[0].stop()
        outputs.append((await post(stack, "/v1/completions", completion(), headers=auth))[1])
        async with stack.session.get(stack.proxy_url + "/health") as resp:
            outputs.append(await resp.read())
    text = b"\n".join(outputs).decode("utf-8", "replace") + caplog.text
    for secret in (UPSTREAM, CLIENT_KEY, "ADMIN-key-xyz"):
        assert secret not in text
