"""Generation through the proxy: passthrough, streaming, failover, cancellation, bad input."""

from __future__ import annotations

import asyncio
import time

import aiohttp
import orjson
import pytest

from proxy.dataplane.headers import REPLICA_HEADER
from tests.support.calls import completion, metric_value, metrics_text, post, records
from tests.support.fleet import run_stack
from tests.support.waiting import eventually, wait_for


async def test_non_streaming_body_is_the_replicas_own() -> None:
    async with run_stack(3) as stack:
        status, body, headers = await post(stack, "/v1/completions", completion())
        assert status == 200
        replica = headers[REPLICA_HEADER]
        index = [s.id for s in stack.sims].index(replica)
        async with stack.session.post(
            stack.sims[index].url + "/v1/completions", json=completion()
        ) as direct:
            direct_body = await direct.json()
        proxied = orjson.loads(body)
        for key in ("id", "created"):
            proxied.pop(key, None)
            direct_body.pop(key, None)
        # Same replica, same seed: the answer passes through untouched (cache state aside).
        assert proxied["choices"] == direct_body["choices"]
        assert proxied["choices"][0]["token_ids"]
        assert len(proxied["choices"][0]["logprobs"]["token_logprobs"]) == 8


async def test_streaming_is_incremental() -> None:
    # 20 tokens at 50 ms each: the whole answer takes about a second to produce.
    async with run_stack(1, sim={"gen_token_s": 0.05}) as stack:
        payload = completion(stream=True, max_tokens=20)
        started = time.monotonic()
        async with stack.session.post(stack.proxy_url + "/v1/completions", json=payload) as resp:
            assert resp.status == 200
            assert resp.headers["Content-Type"].startswith("text/event-stream")
            first = await resp.content.readline()
            first_at = time.monotonic() - started
            rest = await resp.read()
            total = time.monotonic() - started
        assert first.startswith(b"data: ")
        assert rest.rstrip().endswith(b"data: [DONE]")
        assert first_at < total / 2, (first_at, total)


async def test_failover_before_first_byte_and_passive_ejection() -> None:
    async with run_stack(3, gateway_failures=1) as stack:  # ejected at its first failure
        # The prompt's owner on the hash ring dies: requests for it must fail over.
        _, _, headers = await post(stack, "/v1/completions", completion())
        dead = next(s for s in stack.sims if s.id == headers[REPLICA_HEADER])
        await dead.stop()
        results = await asyncio.gather(
            *(post(stack, "/v1/completions", completion()) for _ in range(6))
        )
        assert [status for status, _, _ in results] == [200] * 6
        assert all(headers[REPLICA_HEADER] != dead.id for _, _, headers in results)
        assert dead.id not in {r.id for r in stack.pool.routable()}
        metrics = await metrics_text(stack)
        assert metric_value(metrics, "rollout_proxy_failovers_total") >= 1


async def test_client_disconnect_cancels_the_upstream_request() -> None:
    async with run_stack(1, sim={"faults": {"delay_s": 30.0}}) as stack:
        with pytest.raises(asyncio.TimeoutError):
            async with stack.session.post(
                stack.proxy_url + "/v1/completions",
                json=completion(),
                timeout=aiohttp.ClientTimeout(total=0.3),
            ) as resp:
                await resp.read()

        async def cancelled() -> bool:
            return any(r.get("cancelled") for r in await records(stack, 0))

        await eventually(cancelled, what="the replica to see the request cancelled")
        await wait_for(lambda: stack.pool.total_inflight() == 0, what="slot released")


@pytest.mark.parametrize(
    ("payload", "status", "fragment"),
    [
        (b"{not json", 400, "not valid JSON"),
        (b'{"model": "sim-model", "prompt": 5}', 400, "'prompt' must be"),
        (b'{"model": ["x"], "prompt": [1]}', 400, "'model' must be a string"),
        (b'{"model": "sim-model"}', 400, "'prompt' is required"),
        (orjson.dumps(completion(model="no-such-model")), 404, "does not exist"),
    ],
)
async def test_bad_requests_get_clear_errors_and_service_continues(
    payload: bytes, status: int, fragment: str
) -> None:
    async with run_stack(2) as stack:
        got, body, _ = await post(stack, "/v1/completions", payload)
        assert got == status
        error = orjson.loads(body)["error"]
        assert fragment in error["message"]
        assert error["code"] == status
        good, _, _ = await post(stack, "/v1/completions", completion())
        assert good == 200


async def test_oversized_body_gets_413() -> None:
    async with run_stack(1, max_body_bytes=4096) as stack:
        big = completion(prompt=list(range(5000)))
        status, body, _ = await post(stack, "/v1/completions", big)
        assert status == 413
        assert "--max-body-bytes" in orjson.loads(body)["error"]["message"]
        assert (await post(stack, "/v1/completions", completion()))[0] == 200


async def test_replica_errors_pass_through() -> None:
    async with run_stack(1) as stack:
        # A malformed field beyond what routing reads is the replica's to report.
        status, body, _ = await post(stack, "/v1/completions", completion(n="many"))
        assert status == 400
        assert "error" in orjson.loads(body)


async def test_chat_completions_stream_through() -> None:
    async with run_stack(2) as stack:
        payload = {
            "model": "sim-model",
            "messages": [{"role": "user", "content": "What is 2 + 2?"}],
            "max_tokens": 4,
            "stream": True,
        }
        status, body, _headers = await post(stack, "/v1/chat/completions", payload)
        assert status == 200
        assert body.rstrip().endswith(b"data: [DONE]")
        assert body.count(b"data: ") >= 5


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("POST", "/collective_rpc"),
        ("POST", "/sleep"),
        ("POST", "/sim/faults"),
        ("GET", "/sim/requests"),
        ("GET", "/../etc/passwd"),
        ("POST", "/v1/completions/../../sim/faults"),
    ],
)
async def test_routes_outside_the_allowlist_are_404(method: str, path: str) -> None:
    async with run_stack(1) as stack:
        async with stack.session.request(method, stack.proxy_url + path, data=b"{}") as resp:
            assert resp.status == 404
        assert not [r for r in await records(stack, 0) if r["path"].startswith(("/sim", "/c"))]


async def test_public_routes_are_forwarded_to_one_replica() -> None:
    async with run_stack(2) as stack:
        async with stack.session.get(stack.proxy_url + "/version") as resp:
            assert resp.status == 200
            assert "version" in await resp.json()
        status, body, headers = await post(stack, "/tokenize", {"prompt": "hi there"})
        assert status == 200
        assert orjson.loads(body)["count"] == 8
        assert headers[REPLICA_HEADER] in {s.id for s in stack.sims}
        status, body, _ = await post(stack, "/detokenize", {"tokens": [5, 6]})
        assert (status, orjson.loads(body)) == (200, {"prompt": " t5 t6"})
        async with stack.session.get(stack.proxy_url + "/ping") as resp:
            assert resp.status == 200
