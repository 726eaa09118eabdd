"""A real browser for the site's tests: Debian's Chromium, headless, driven through Debian's
chromedriver (selenium), with every request to a host other than loopback refused and counted.

Why this driver: ``chromium`` and ``chromium-driver`` come from the same Debian source package,
so the driver always speaks the browser's version (a security update moves both at once), and
selenium's bindings are pure Python from PyPI; nothing downloads a browser of its own
(``make test-tools`` installs the two packages). Selenium Manager is never asked for a driver:
both paths are given.

How outside hosts are refused and counted: the pages are opened in a browser context of their
own (CDP ``Target.createBrowserContext``) whose proxy is ``Gate``, a server on loopback that
answers every request ``403`` and records it (the host of a ``CONNECT``, the URL of a plain
request). Chromium sends loopback straight to the site and everything else of that context to
the proxy: the page's own loads, its scripts' fetches, its workers', its fonts'. The browser's
own traffic (its updater, its default search engine, its clock) is outside that context, so it
never counts against a page; ``--host-resolver-rules`` makes every name but loopback's
unresolvable for it, so it leaves the machine neither.
"""

from __future__ import annotations

import contextlib
import functools
import http.server
import itertools
import json
import shutil
import socketserver
import tempfile
import threading
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import websocket
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.remote.command import Command

# Debian's binary itself: /usr/bin/chromium is a wrapper script that adds the flags and Google
# API keys of /etc/chromium.d, which this test does not want.
CHROMIUM = Path("/usr/lib/chromium/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
WIDTH, HEIGHT = 1280, 900  # the window: the width the reading checks are made at
DEVTOOLS_S = 30  # one DevTools command on the browser's own endpoint
PAGE_LOAD_S = 60  # a page's load event (the site is on loopback: well under a second)
FLAGS = (
    "--headless",
    "--no-sandbox",  # root, as CI is
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-features=AutofillServerCommunication",  # the form fields of a page, asked of Google
    "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
    f"--window-size={WIDTH},{HEIGHT}",
)


def installed() -> bool:
    return CHROMIUM.is_file() and CHROMEDRIVER.is_file()


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        """Not on the test's output."""


@contextlib.contextmanager
def serve_folder(folder: Path) -> Iterator[str]:
    """``folder`` over HTTP on loopback; yields its base URL (``http://127.0.0.1:PORT/``)."""
    handler = functools.partial(_Quiet, directory=str(folder))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, name="site", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


class _Refuse(socketserver.StreamRequestHandler):
    server: _GateServer

    def handle(self) -> None:
        line = self.rfile.readline(8192).decode("latin-1").strip()
        method, _, rest = line.partition(" ")
        target = rest.rsplit(" ", 1)[0]
        self.server.gate.record(target if method != "CONNECT" else f"https://{target}")
        self.wfile.write(
            b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
        )


class _GateServer(socketserver.ThreadingTCPServer):
    daemon_threads = True
    gate: Gate


@dataclass
class Gate:
    """The proxy of the pages' browser context: refuses and records every request it is sent
    (everything but loopback)."""

    seen: list[str] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def record(self, target: str) -> None:
        with self._lock:
            self.seen.append(target)

    def count(self) -> int:
        with self._lock:
            return len(self.seen)

    def since(self, start: int) -> list[str]:
        with self._lock:
            return self.seen[start:]


@contextlib.contextmanager
def gate() -> Iterator[tuple[Gate, str]]:
    """A ``Gate`` on loopback; yields it and its proxy URL."""
    server = _GateServer(("127.0.0.1", 0), _Refuse)
    server.gate = Gate()
    thread = threading.Thread(target=server.serve_forever, name="gate", daemon=True)
    thread.start()
    try:
        yield server.gate, f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


class _DevTools:
    """The browser's own DevTools endpoint (not a page's): what chromedriver does not offer."""

    def __init__(self, address: str) -> None:
        with urllib.request.urlopen(f"http://{address}/json/version", timeout=DEVTOOLS_S) as got:
            url = json.load(got)["webSocketDebuggerUrl"]
        self._socket = websocket.create_connection(url, timeout=DEVTOOLS_S, suppress_origin=True)
        self._ids = itertools.count(1)

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        sent = next(self._ids)
        self._socket.send(json.dumps({"id": sent, "method": method, "params": params}))
        while True:  # events are not asked for; answers come in order
            message = json.loads(self._socket.recv())
            if message.get("id") == sent:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                result: dict[str, Any] = message["result"]
                return result

    def close(self) -> None:
        self._socket.close()


def console_errors(driver: webdriver.Chrome) -> list[str]:
    """The console's errors since the last call (an uncaught exception, a failed load: level
    ``SEVERE``), from any page or worker of the browser (chromedriver's ``browser`` log)."""
    entries: list[dict[str, Any]] = driver.execute(Command.GET_LOG, {"type": "browser"})["value"]
    return [str(entry["message"]) for entry in entries if entry["level"] == "SEVERE"]


@contextlib.contextmanager
def chromium(proxy: str) -> Iterator[webdriver.Chrome]:
    """Headless Chromium at ``WIDTH`` x ``HEIGHT``, its console kept (``get_log("browser")``),
    the driver's window a tab of a fresh browser context whose proxy is ``proxy``."""
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    profile = tempfile.mkdtemp(prefix="chromium-profile-")
    for flag in (*FLAGS, f"--user-data-dir={profile}"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=options, service=Service(str(CHROMEDRIVER)))
    devtools = None
    try:
        driver.set_page_load_timeout(PAGE_LOAD_S)
        devtools = _DevTools(driver.capabilities["goog:chromeOptions"]["debuggerAddress"])
        context = devtools.call("Target.createBrowserContext", proxyServer=proxy)
        tab = devtools.call(
            "Target.createTarget", url="about:blank", browserContextId=context["browserContextId"]
        )
        first = driver.current_window_handle
        driver.switch_to.window(tab["targetId"])
        driver.switch_to.window(first)
        driver.close()  # the default context's tab: nothing is opened there
        driver.switch_to.window(tab["targetId"])
        driver.set_window_size(WIDTH, HEIGHT)
        yield driver
    finally:
        if devtools is not None:
            devtools.close()
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)
