"""``rollout-proxy top HOST:PORT``: the address as users type it (``http://`` assumed); a garbled
one is one line saying the shape wanted."""

from __future__ import annotations

import socket

import pytest

from proxy.console.top import main
from tests.console.test_top import top
from tests.support.fleet import run_stack


async def test_an_address_without_a_scheme_is_taken_as_http() -> None:
    async with run_stack(1) as stack:
        address = stack.proxy_url.removeprefix("http://")
        assert address != stack.proxy_url
        code, out, err = await top(address, "--once")
        assert code == 0, err
        assert stack.sims[0].id in out


@pytest.mark.parametrize("given", ["ftp://host:1", "host:99999", "http://:9000", "a b:1"])
def test_a_garbled_address_is_one_line(given: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([given, "--once"]) == 2
    err = capsys.readouterr().err
    assert err == (
        f"rollout-proxy top: {given!r} is not a proxy's address: "
        "give HOST:PORT or http(s)://HOST:PORT\n"
    )


async def test_a_proxy_that_is_not_there_is_one_line_in_words() -> None:
    with socket.socket() as held:  # a port nobody listens on: bound, never listening
        held.bind(("127.0.0.1", 0))
        port = held.getsockname()[1]
        code, out, err = await top(f"127.0.0.1:{port}", "--once")
    assert code == 1 and out == ""
    assert err == (
        f"rollout-proxy top: http://127.0.0.1:{port}: connection refused: "
        "is the proxy running there?\n"
    )
