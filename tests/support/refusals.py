"""Provoking the error table's rows (``proxy.http.errors.ANSWERS``) through a real proxy.

``provokes(Kind, ...)`` marks the test that provokes each row (``PROVOKED``: what
``tests/unit/test_error_table.py`` walks the table against); ``refused`` checks one answer
against its row: the status, vLLM's error shape, ``Retry-After`` and ``Connection: close`` as
the row says, and the rejection counted under the row's reason.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import orjson
from multidict import CIMultiDict

from proxy.errors import DomainError
from proxy.http.errors import ANSWERS, answer_for
from tests.support.calls import metric_value
from tests.support.fleet import Stack

T = TypeVar("T", bound=Callable[..., Any])
PROVOKED: dict[type[DomainError], str] = {}  # a row -> the test that provokes it
SHAPE = {"message", "type", "param", "code"}


def provokes(*kinds: type[DomainError]) -> Callable[[T], T]:
    """Marks a test as the one that provokes ``kinds``' rows."""

    def mark(test: T) -> T:
        for kind in kinds:
            assert kind in ANSWERS, f"{kind.__name__} is no row of the table"
            PROVOKED[kind] = f"{test.__module__}::{test.__name__}"
        return test

    return mark


async def refused(
    stack: Stack,
    answer: tuple[int, bytes, Mapping[str, str]],
    kind: type[DomainError],
    *,
    status: int | None = None,
    reason: str | None = None,
    count: float = 1,
    auth: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """Checks ``answer`` (status, body, headers) is ``kind``'s row; returns the error object.

    ``status``: the one it echoes (a row that echoes); ``reason``: the error's own, where the
    class has none (the limiter's ``Rejected``); ``count``: how many of that reason the proxy
    has counted by now; ``auth``: the headers ``/metrics`` needs."""
    row = answer_for(kind)
    got, body, headers = answer
    assert got == (status if status is not None else row.status), body
    payload = orjson.loads(body)
    error = payload["error"]
    assert set(error) == SHAPE and error["code"] == got and isinstance(error["message"], str)
    assert ("Retry-After" in headers) == row.retry, dict(headers)
    assert (headers.get("Connection", "").lower() == "close") == row.closes, dict(headers)
    label = reason or kind.reason or row.reason
    async with stack.session.get(stack.proxy_url + "/metrics", headers=auth) as resp:
        text = await resp.text()
    assert metric_value(text, f'rollout_proxy_rejections_total{{reason="{label}"}}') == count
    return dict(payload)


async def raw_answer(
    stack: Stack, request: bytes, timeout_s: float = 5.0
) -> tuple[int, bytes, CIMultiDict[str]]:
    """The answer to ``request`` sent as it is on a new connection: status, body, headers."""
    host, port = stack.proxy_url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        writer.write(request)
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout_s)
        status_line, *lines = head.decode("latin-1").rstrip("\r\n").split("\r\n")
        headers: CIMultiDict[str] = CIMultiDict()
        for line in lines:
            name, _, value = line.partition(":")
            headers.add(name.strip(), value.strip())
        length = int(headers["Content-Length"])
        body = await asyncio.wait_for(reader.readexactly(length), timeout_s)
        return int(status_line.split()[1]), body, headers
    finally:
        writer.close()
