"""``rollout-proxy top [URL]``: a live terminal view of a proxy, local or on HF Jobs.

Every ``--interval`` seconds it reads ``/proxy/status`` and ``/metrics`` and draws the fleet (per
replica: state, in flight, queue, KV usage, hit ratio, adapters with their digests' prefixes, the
served-policy probe's verdicts) and the run (throughput, latency percentiles, queue, sync times,
the served policy's alarm, the advisor's verdict, its warnings and figures), laid out to fit an
80x24 terminal with the replica table on screen (``view``). ``--once`` prints one plain-text
snapshot and exits (full ``host:port`` ids, never truncated, whatever the terminal).
Press ``q`` to quit the live view.

Token: ``Authorization: Bearer`` from the environment, never a flag's value: ``HF_TOKEN`` for an
HF Jobs URL (``*.hf.jobs``, whose edge demands it), ``PROXY_API_KEY`` otherwise (the proxy's own
``--api-key``); ``--proxy-token-env VAR`` names another variable. Flags: ``console.flags``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import select
import sys
import termios
import time
import tty
from collections.abc import Iterator, Sequence
from typing import Any
from urllib.parse import urlsplit

import aiohttp

from proxy.config.programs import install_hint
from proxy.console.figures import Samples, figures, parse
from proxy.console.flags import build_parser
from proxy.console.view import Snapshot, live_view, plain

FETCH_TIMEOUT_S = 10.0


def proxy_url(text: str) -> str:
    """``HOST:PORT`` or a URL -> the proxy's base URL (``http://`` unless given); ValueError
    saying the shape wanted. ``urlsplit`` alone reads ``localhost:9100`` as scheme ``localhost``."""
    url = text.strip() if "://" in text else "http://" + text.strip()
    parts = urlsplit(url)
    try:
        parts.port  # noqa: B018  (urlsplit checks the port only when asked)
    except ValueError:
        parts = urlsplit("")
    if parts.scheme not in ("http", "https") or not parts.hostname or " " in url:
        raise ValueError(
            f"{text!r} is not a proxy's address: give HOST:PORT or http(s)://HOST:PORT"
        )
    return url


def token_variable(url: str, explicit: str | None) -> str:
    if explicit is not None:
        return explicit
    host = urlsplit(url).hostname or ""
    return "HF_TOKEN" if host.endswith(".hf.jobs") else "PROXY_API_KEY"


class Reader:
    """Fetches a proxy's status and metrics; keeps the last scrape for rates."""

    def __init__(self, url: str, token: str | None) -> None:
        self.url = url.rstrip("/")
        self._headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._before: tuple[float, Samples] | None = None

    async def read(self, session: aiohttp.ClientSession) -> Snapshot:
        timeout = aiohttp.ClientTimeout(total=FETCH_TIMEOUT_S)
        async with session.get(
            self.url + "/proxy/status", headers=self._headers, timeout=timeout
        ) as r:
            if r.status != 200:
                raise RuntimeError(_refusal("/proxy/status", r.status))
            status: dict[str, Any] = await r.json()
        async with session.get(self.url + "/metrics", headers=self._headers, timeout=timeout) as r:
            if r.status != 200:
                raise RuntimeError(_refusal("/metrics", r.status))
            samples = parse(await r.text())
        now = time.monotonic()
        if self._before is None:
            seconds, before = float(status.get("uptime_s") or 0.0), None
        else:
            seconds, before = now - self._before[0], self._before[1]
        self._before = (now, samples)
        return Snapshot(self.url, status, figures(samples, before, seconds))

    async def _get(self, session: aiohttp.ClientSession, path: str) -> bytes:
        timeout = aiohttp.ClientTimeout(total=FETCH_TIMEOUT_S)
        async with session.get(self.url + path, headers=self._headers, timeout=timeout) as r:
            if r.status != 200:
                raise RuntimeError(_refusal(path, r.status))
            return await r.read()


def _refusal(path: str, status: int) -> str:
    hint = {
        401: "the token is missing or wrong (HF_TOKEN for *.hf.jobs, PROXY_API_KEY otherwise, "
        "or --token-env VAR)",
        403: "the token may not read this job (it needs read access to the job's namespace)",
    }.get(status, "is the URL a rollout-proxy?")
    return f"{path} answered HTTP {status}: {hint}"


@contextlib.contextmanager
def _keys() -> Iterator[None]:
    """The terminal in cbreak mode (one key at a time, no echo) while the view runs."""
    if not sys.stdin.isatty():
        yield
        return
    fd = sys.stdin.fileno()
    saved = termios.tcgetattr(fd)
    tty.setcbreak(fd)
    try:
        yield
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)


def _pressed_q() -> bool:
    if not sys.stdin.isatty():
        return False
    ready, _, _ = select.select([sys.stdin], [], [], 0)
    return bool(ready) and sys.stdin.read(1).lower() == "q"


async def _live(reader: Reader, interval_s: float) -> int:
    from rich.console import Console
    from rich.live import Live
    from rich.text import Text

    console = Console()
    async with aiohttp.ClientSession() as session:
        with _keys(), Live(Text("connecting..."), console=console, auto_refresh=False) as live:
            while True:
                try:
                    live.update(live_view(await reader.read(session)), refresh=True)
                except (aiohttp.ClientError, TimeoutError, RuntimeError) as exc:
                    live.update(Text(f"{reader.url}: {unreachable(exc)} (retrying)"), refresh=True)
                deadline = time.monotonic() + interval_s
                while time.monotonic() < deadline:
                    if _pressed_q():
                        return 0
                    await asyncio.sleep(0.05)


def unreachable(exc: BaseException) -> str:
    """Why the proxy could not be read, in words (``connection refused: is the proxy running
    there?``), not aiohttp's ``Cannot connect to host ... [Connect call failed ...]``."""
    if isinstance(exc, aiohttp.ClientConnectorDNSError):
        return f"{exc.host} does not resolve"
    if isinstance(exc, aiohttp.ClientConnectorError) and exc.os_error.errno:
        return f"{os.strerror(exc.os_error.errno).lower()}: is the proxy running there?"
    if isinstance(exc, TimeoutError):
        return "no answer in time"
    return str(exc) or type(exc).__name__


async def _once(reader: Reader) -> int:
    async with aiohttp.ClientSession() as session:
        try:
            snap = await reader.read(session)
        except (aiohttp.ClientError, TimeoutError, RuntimeError) as exc:
            print(f"rollout-proxy top: {reader.url}: {unreachable(exc)}", file=sys.stderr)
            return 1
    sys.stdout.write(plain(snap))
    return 0


def main(argv: Sequence[str]) -> int:
    args = build_parser().parse_args(list(argv))
    try:
        url = proxy_url(args.url)
    except ValueError as exc:
        print(f"rollout-proxy top: {exc}", file=sys.stderr)
        return 2
    variable = token_variable(url, args.token_env)
    reader = Reader(url, os.environ.get(variable))
    if args.once:
        return asyncio.run(_once(reader))
    try:
        import rich  # noqa: F401
    except ImportError:
        print(f"rollout-proxy top: the live view needs rich: {install_hint('top')}, or use "
              "--once", file=sys.stderr)  # fmt: skip
        return 2
    return asyncio.run(_live(reader, args.interval))
