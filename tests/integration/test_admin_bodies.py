"""A bad body to ``POST /admin/replicas`` is answered 400 with one line saying what to send (it
said ``cannot add replica: 'url'``, Python's KeyError, for a body without its url)."""

from __future__ import annotations

import orjson
import pytest

from tests.support.fleet import run_stack

ADMIN = {"Authorization": "Bearer admin-secret"}
WHAT_TO_SEND = 'cannot add replica: the body must be {"url": "http://host:port"}'


@pytest.mark.parametrize("body", [b'{"u": 1}', b"not json", b'["http://127.0.0.1:9"]', b""])
async def test_a_body_without_its_url_says_what_to_send(body: bytes) -> None:
    async with run_stack(1, admin_key="admin-secret") as stack:
        async with stack.session.post(
            stack.proxy_url + "/admin/replicas", data=body, headers=ADMIN
        ) as response:
            status, answer = response.status, orjson.loads(await response.read())
        assert len(list(stack.pool)) == 1
    assert status == 400
    assert answer["error"]["message"] == WHAT_TO_SEND
