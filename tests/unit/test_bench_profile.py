"""The profile suite's areas: each profiled function is charged to its module, dotted."""

from __future__ import annotations

from pathlib import Path

import proxy.dataplane.forward
from benchmarks.suites.cpu_profile import area


def test_a_proxy_module_wherever_the_checkout_lives() -> None:
    assert area(str(Path(proxy.dataplane.forward.__file__).resolve()), "f") == (
        "proxy.dataplane.forward"
    )


def test_installed_packages_the_standard_library_and_c_functions() -> None:
    site = "/x/lib/python3.11/site-packages/aiohttp/web_protocol.py"
    assert area(site, "data_received") == "aiohttp.web_protocol"
    assert area("/usr/lib/python3.11/asyncio/events.py", "_run") == "asyncio.events"
    assert area("~", "<method 'send' of '_socket.socket' objects>") == "send _socket.socket"
