"""Request identity: X-Request-ID made or kept, passed upstream with traceparent, returned on
every answer, and in the access log line."""

from __future__ import annotations

import logging

import pytest

from tests.support.calls import completion, post
from tests.support.fleet import run_stack
from tests.support.scripted import MODEL, ok, scripted

PARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


async def test_a_request_without_an_id_gets_one_and_every_answer_carries_it() -> None:
    async with run_stack(1, api_key="k") as stack:
        auth = {"Authorization": "Bearer k"}
        ids = set()
        for _ in range(3):
            status, _, headers = await post(stack, "/v1/completions", completion(), headers=auth)
            assert status == 200
            ids.add(headers["X-Request-ID"])
        assert len(ids) == 3 and all(ids)
        for path, expected in (("/nope", 404), ("/health", 200)):
            async with stack.session.get(stack.proxy_url + path, headers=auth) as resp:
                assert resp.status == expected and resp.headers["X-Request-ID"]
        status, _, headers = await post(stack, "/v1/completions", completion())  # no key: 401
        assert status == 401 and headers["X-Request-ID"]


async def test_a_clients_id_and_traceparent_go_upstream_and_the_id_comes_back() -> None:
    async with (
        scripted(lambda n: [ok(b"{}")], replica=True) as replica,
        run_stack(0, extra=(replica.url,)) as stack,
    ):
        headers = {"X-Request-ID": "run7/step12/rollout-3", "traceparent": PARENT}
        status, _, answer = await post(
            stack, "/v1/completions", completion(model=MODEL), headers=headers
        )
        assert status == 200
        assert answer["X-Request-ID"] == "run7/step12/rollout-3"
        head = replica.requests[-1].decode()
        assert "X-Request-ID: run7/step12/rollout-3\r\n" in head
        assert f"traceparent: {PARENT}\r\n" in head


async def test_a_malformed_traceparent_is_not_passed_on() -> None:
    async with (
        scripted(lambda n: [ok(b"{}")], replica=True) as replica,
        run_stack(0, extra=(replica.url,)) as stack,
    ):
        await post(stack, "/v1/completions", completion(model=MODEL), headers={"traceparent": "x"})
        assert "traceparent" not in replica.requests[-1].decode()


@pytest.mark.parametrize("value", ["x" * 201, "caf\u00e9"])
async def test_an_id_that_cannot_be_passed_on_is_a_400(value: str) -> None:
    async with run_stack(1) as stack:
        status, body, _ = await post(
            stack, "/v1/completions", completion(), headers={"X-Request-ID": value}
        )
        assert status == 400 and b"X-Request-ID" in body


async def test_the_access_log_line_carries_the_id(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="proxy.access")
    async with run_stack(1, access_log=True) as stack:
        await post(stack, "/v1/completions", completion(), headers={"X-Request-ID": "abc-123"})
    lines = [r.getMessage() for r in caplog.records if r.name == "proxy.access"]
    assert any(line.startswith("abc-123 POST /v1/completions 200 ") for line in lines), lines
