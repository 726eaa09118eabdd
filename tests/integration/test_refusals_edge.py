"""The error table's rows the HTTP edge itself raises, each provoked through a real proxy on
loopback: its status, vLLM's error shape, ``Retry-After`` and ``Connection: close`` as its row
says, and ``rollout_proxy_rejections_total{reason}`` counting it (``tests.support.refusals``).
The rows the fleet and the replicas cause are in ``test_refusals_fleet``."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from multidict import CIMultiDictProxy

from proxy.adapters.calls import BadAdapterRequest, UnknownAdapter
from proxy.app import PROXY
from proxy.http.bodies import BadAdminBody, BodyBudgetFull, BodyTimeout, BodyTooLarge
from proxy.http.refusals import (
    AdminDisabled,
    BadPauseMode,
    BadRequestId,
    HostNotAllowed,
    NotReported,
    TooManyConnections,
    Unauthorized,
    UnknownReplica,
    UnknownRoute,
    UnsafeRequest,
    UploadRefused,
    WrongMethod,
)
from proxy.routing.facts import UnknownModel
from proxy.routing.peek import BadBody
from proxy.runs.table import OverShare, UnknownRun
from tests.support.adapters import write_adapter
from tests.support.calls import completion, load_body, post
from tests.support.fleet import Stack, run_stack
from tests.support.refusals import provokes, raw_answer, refused
from tests.support.waiting import eventually

ADMIN = {"Authorization": "Bearer admin-k"}
JSON_HEAD = b"Host: x\r\nContent-Type: application/json\r\n"


async def ask(
    stack: Stack, method: str, path: str, **kw: Any
) -> tuple[int, bytes, CIMultiDictProxy[str]]:
    async with stack.session.request(method, stack.proxy_url + path, **kw) as resp:
        return resp.status, await resp.read(), resp.headers


@provokes(BadRequestId)
async def test_a_request_id_that_cannot_be_passed_on() -> None:
    async with run_stack(1) as stack:
        answer = await post(stack, "/v1/completions", completion(), headers={"X-Request-ID": "é"})
        error = (await refused(stack, answer, BadRequestId))["error"]
        assert error["param"] == "X-Request-ID"


@provokes(UnsafeRequest)
async def test_a_content_type_that_cannot_be_passed_on() -> None:
    async with run_stack(1) as stack:
        answer = await raw_answer(
            stack,
            b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n"
            b"Content-Type: application/json; charset=caf\xc3\xa9\r\nContent-Length: 2\r\n\r\n{}",
        )
        error = (await refused(stack, answer, UnsafeRequest))["error"]
        assert error["message"] == "the Content-Type header must be printable ASCII"


@provokes(BadPauseMode)
async def test_a_pause_mode_vllm_does_not_have() -> None:
    async with run_stack(1) as stack:
        answer = await post(stack, "/pause?mode=never", b"")
        assert (await refused(stack, answer, BadPauseMode))["error"]["param"] == "mode"


@provokes(BadBody)
async def test_a_generation_body_that_cannot_be_routed() -> None:
    async with run_stack(1) as stack:
        await refused(stack, await post(stack, "/v1/completions", b"{not json"), BadBody)


@provokes(BadAdapterRequest)
async def test_a_load_body_without_its_name() -> None:
    async with run_stack(1) as stack:
        answer = await post(stack, "/v1/load_lora_adapter", {"lora_name": 3})
        assert (await refused(stack, answer, BadAdapterRequest))["error"]["param"] == "lora_name"


@provokes(BadAdminBody)
async def test_admin_bodies_that_say_nothing_the_route_takes() -> None:
    async with run_stack(1, admin_key="admin-k") as stack:
        answer = await post(stack, "/admin/replicas", b"not json", headers=ADMIN)
        error = (await refused(stack, answer, BadAdminBody))["error"]
        assert (
            error["message"] == 'cannot add replica: the body must be {"url": "http://host:port"}'
        )
        answer = await post(stack, "/admin/replicas", {"url": "ftp://x"}, headers=ADMIN)
        error = (await refused(stack, answer, BadAdminBody, count=2))["error"]
        assert error["message"].startswith("cannot add replica: replica URL 'ftp://x' must")
        long_url = "http://127.0.0.1:9/" + "x" * 10_000  # bounded before anything echoes it
        answer = await post(stack, "/admin/replicas", {"url": long_url}, headers=ADMIN)
        error = (await refused(stack, answer, BadAdminBody, count=3))["error"]
        assert "at most 2048 characters" in error["message"] and "xxxx" not in error["message"]
        answer = await post(stack, "/admin/runs", {"weight": 2}, headers=ADMIN)
        error = (await refused(stack, answer, BadAdminBody, count=4))["error"]
        assert error["message"].startswith("cannot declare the run: the body must be")
        answer = await post(stack, "/admin/runs", {"name": "x.y"}, headers=ADMIN)
        error = (await refused(stack, answer, BadAdminBody, count=5))["error"]
        assert error["message"].startswith("cannot declare the run: run name 'x.y'")


@provokes(OverShare)
async def test_a_load_past_the_runs_share(tmp_path: Path) -> None:
    async with run_stack(1, runs="a,b=2", sim={"max_loras": 3}) as stack:  # a's share: 1
        for version in (1, 2):
            name = f"trl-policy-v{version}"
            body = load_body(name, write_adapter(tmp_path, name))
            answer = await post(stack, "/runs/a/v1/load_lora_adapter", body)
        await refused(stack, answer, OverShare)


@provokes(Unauthorized)
async def test_a_request_without_the_key() -> None:
    async with run_stack(1, api_key="api-k", admin_key="admin-k") as stack:
        auth = {"Authorization": "Bearer api-k"}
        answer = await post(stack, "/v1/completions", completion())
        assert answer[2]["WWW-Authenticate"] == "Bearer"
        await refused(stack, answer, Unauthorized, auth=auth)
        answer = await ask(stack, "GET", "/admin/replicas", headers=auth)  # not the admin key
        error = (await refused(stack, answer, Unauthorized, count=2, auth=auth))["error"]
        assert error["message"].startswith("missing or wrong admin key")


@provokes(AdminDisabled)
async def test_the_admin_api_without_an_admin_key() -> None:
    async with run_stack(1) as stack:
        await refused(stack, await ask(stack, "GET", "/admin/replicas"), AdminDisabled)


@provokes(HostNotAllowed)
async def test_a_replica_host_the_upstream_token_may_not_go_to() -> None:
    async with run_stack(1, admin_key="admin-k") as stack:
        answer = await post(
            stack, "/admin/replicas", {"url": "http://10.0.0.7:8000"}, headers=ADMIN
        )
        await refused(stack, answer, HostNotAllowed)
        assert len(list(stack.pool)) == 1


@provokes(UnknownModel)
async def test_a_model_no_replica_serves() -> None:
    async with run_stack(1) as stack:
        answer = await post(stack, "/v1/completions", completion(model="no-such-model"))
        assert (await refused(stack, answer, UnknownModel))["error"]["param"] == "model"


@provokes(UnknownRun)
async def test_a_run_no_one_declared() -> None:
    async with run_stack(1, runs="a", admin_key="admin-k") as stack:
        await refused(stack, await post(stack, "/runs/c/v1/completions", completion()), UnknownRun)
        answer = await ask(stack, "DELETE", "/admin/runs/c", headers=ADMIN)
        error = (await refused(stack, answer, UnknownRun, count=2))["error"]
        assert error["message"].startswith("no run 'c' on this proxy (runs: a)")


@provokes(UnknownRoute)
async def test_a_route_the_proxy_does_not_serve() -> None:
    async with run_stack(1) as stack:
        await refused(stack, await post(stack, "/collective_rpc", {}), UnknownRoute)


@provokes(WrongMethod)
async def test_a_route_asked_with_another_method() -> None:
    async with run_stack(1) as stack:
        await refused(stack, await ask(stack, "GET", "/v1/completions"), WrongMethod)


@provokes(UnknownReplica)
async def test_an_admin_call_for_a_replica_the_pool_does_not_have() -> None:
    async with run_stack(1, admin_key="admin-k") as stack:
        answer = await post(stack, "/admin/replicas/nope:1/drain", b"", headers=ADMIN)
        await refused(stack, answer, UnknownReplica)


@provokes(UnknownAdapter)
async def test_an_unload_of_an_adapter_nobody_has() -> None:
    async with run_stack(1) as stack:
        answer = await post(stack, "/v1/unload_lora_adapter", {"lora_name": "nope"})
        error = (await refused(stack, answer, UnknownAdapter))["error"]
        assert error["message"] == "The lora adapter 'nope' cannot be found."


@provokes(BodyTimeout)
async def test_a_body_that_does_not_arrive_in_time() -> None:
    async with run_stack(1, client_body_timeout=0.3, admin_key="admin-k") as stack:
        for count, target in enumerate((b"/v1/completions", b"/admin/replicas"), start=1):
            answer = await raw_answer(
                stack,
                b"POST " + target + b" HTTP/1.1\r\n" + JSON_HEAD
                + b"Authorization: Bearer admin-k\r\nContent-Length: 100\r\n\r\n{",
            )  # fmt: skip
            await refused(stack, answer, BodyTimeout, count=count)


@provokes(BodyTooLarge)
async def test_a_body_above_the_limit() -> None:
    async with run_stack(1, max_body_bytes=1024, admin_key="admin-k") as stack:
        answer = await raw_answer(
            stack,
            b"POST /v1/completions HTTP/1.1\r\n" + JSON_HEAD + b"Content-Length: 9999\r\n\r\n",
        )
        await refused(stack, answer, BodyTooLarge)
        # The admin API's bodies are bounded alike (aiohttp's own 413 answered them before).
        body = {"url": "http://127.0.0.1:1/" + "x" * 2000}
        answer = await post(stack, "/admin/replicas", body, headers=ADMIN)
        await refused(stack, answer, BodyTooLarge, count=2)
        # A chunked body, whole in the first packet (aiohttp's own check found it: ours now).
        chunk = b" " * 2000
        answer = await raw_answer(
            stack,
            b"POST /v1/completions HTTP/1.1\r\n" + JSON_HEAD + b"Transfer-Encoding: chunked\r\n\r\n"
            + b"%x\r\n%s\r\n0\r\n\r\n" % (len(chunk), chunk),
        )  # fmt: skip
        await refused(stack, answer, BodyTooLarge, count=3)


@provokes(BodyBudgetFull)
async def test_bodies_beyond_the_memory_budget() -> None:
    async with run_stack(1, max_body_bytes=4096, max_body_bytes_in_flight=4096) as stack:
        host, port = stack.proxy_url.removeprefix("http://").split(":")
        _, writer = await asyncio.open_connection(host, int(port))
        writer.write(
            b"POST /v1/completions HTTP/1.1\r\n" + JSON_HEAD
            + b"Content-Length: 4096\r\n\r\n" + b" " * 4000
        )  # fmt: skip
        budget = stack.proxy_app[PROXY].edge.handlers.bodies.budget

        async def held() -> bool:  # its handler holds what arrived, waiting on the rest
            return budget.held >= 4000

        try:
            await eventually(held, what="the proxy to hold the first body")
            answer = await post(stack, "/v1/completions", completion())
        finally:
            writer.close()
        await refused(stack, answer, BodyBudgetFull)


@provokes(TooManyConnections)
async def test_a_connection_beyond_the_cap() -> None:
    async with run_stack(1, max_client_connections=1) as stack:
        host, port = stack.proxy_url.removeprefix("http://").split(":")
        _, held = await asyncio.open_connection(host, int(port))
        held.write(b"POST /v1/completions HTTP/1.1\r\n")  # speaks: it counts against the cap
        guard = stack.proxy_app[PROXY].edge.guard

        async def counted() -> bool:
            return guard.speaking == 1

        try:
            await eventually(counted, what="the first connection counted")
            answer = await raw_answer(stack, b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        finally:
            held.close()
        await held.wait_closed()

        async def speaking_none() -> bool:
            return guard.speaking == 0

        await eventually(speaking_none, what="the cap to free up")  # /metrics may then connect
        await refused(stack, answer, TooManyConnections)


@provokes(NotReported)
async def test_server_info_and_models_before_any_replica_reported() -> None:
    async with run_stack(1, ready=False, sim={"faults": {"unhealthy": True}}) as stack:
        await refused(stack, await ask(stack, "GET", "/server_info"), NotReported)
        await refused(stack, await ask(stack, "GET", "/v1/models"), NotReported, count=2)


@provokes(UploadRefused)
async def test_an_upload_the_proxys_store_refuses() -> None:
    async with run_stack(1) as stack:
        answer = await raw_answer(
            stack,
            b"PUT /rollout/adapters/trl-policy-v1 HTTP/1.1\r\nHost: x\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
        )
        error = (await refused(stack, answer, UploadRefused, status=411))["error"]
        assert error["message"] == "an upload needs a Content-Length"
