"""``rollout-proxy top [URL]``: a live terminal view of a proxy, local or on HF Jobs.

Every ``--interval`` seconds it reads ``/proxy/status`` and ``/metrics`` and draws the fleet (per
replica: state, in flight, queue, KV usage, hit ratio, adapters with their digests' prefixes, the
served-policy probe's verdicts) and the run (throughput, latency percentiles, queue, sync times,
the served policy's alarm, the advisor's verdict and its figures). ``--once`` prints one
plain-text snapshot and exits (full ``host:port`` ids, never truncated, whatever the terminal).
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
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import aiohttp

from proxy.console.figures import Figures, Samples, figures, parse
from proxy.console.flags import build_parser

FETCH_TIMEOUT_S = 10.0


@dataclass
class Snapshot:
    url: str
    status: dict[str, Any]
    figures: Figures


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


# -- rendering ---------------------------------------------------------------------------------


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.0f}%"


def _ms(value: float | None) -> str:
    if value is None:
        return "-"
    return "inf" if value == float("inf") else f"{1000 * value:.0f} ms"


def _num(value: Any) -> str:
    if value is None:
        return "-"
    return f"{value:.3g}" if isinstance(value, float) else str(value)


def summary_lines(snap: Snapshot) -> list[str]:
    s, f = snap.status, snap.figures
    replicas = s.get("replicas", [])
    routable = sum(1 for r in replicas if r.get("routable"))
    quality = s.get("quality") or {}
    syncs = s.get("syncs") or {}
    lines = [
        f"proxy {snap.url}  policy {s.get('policy', '-')}  replicas {routable}/{len(replicas)} "
        f"routable  pid {s.get('pid', '-')}  restarts {s.get('restarts', 0)}",
        f"in flight {s.get('inflight', 0)}/{s.get('max_inflight', '-')}  "
        f"queued {s.get('queued', 0)}  {_rate(snap)}  "
        f"latency p50 {_ms(f.p50_s)} p99 {_ms(f.p99_s)}  (over {f.seconds:.0f} s)",
        f"cache hit ratio {_pct(quality.get('hit_ratio', f.hit_ratio))}  available "
        f"{_pct(quality.get('available'))}  affinity efficiency {_pct(quality.get('efficiency'))}",
        f"syncing {_yes(syncs.get('open'))}  paused {_yes(s.get('paused'))}"
        f"  pause {syncs.get('pause', '-')}  syncs {syncs.get('count', 0)}  last sync "
        f"{_num(syncs.get('last_s'))} s  paused share {_pct(syncs.get('paused_share'))}",
    ]
    for name, counts in sorted((s.get("rollouts") or {}).items()):
        if name == "" or counts.get("answered"):
            lines.append(
                f"rollouts{' of run ' + name if name else ''} {counts.get('answered', 0)}  "
                f"stale {counts.get('stale', 0)} ({_pct(counts.get('stale_share'))} of their "
                "tokens: answered after their version left the window)"
            )
    for name, run in sorted((s.get("runs") or {}).items()):  # several runs on one fleet
        lines.append(
            f"run {name}  weight {_num(run.get('weight'))}  paused {_yes(run.get('paused'))}  "
            f"adapters {run.get('adapters', 0)}/{_num(run.get('max_loras_share'))}  in flight "
            f"{run.get('inflight', 0)}  queued {run.get('queued', 0)}  requests "
            f"{run.get('requests', 0)}  pauses {run.get('pauses', 0)}"
            + (f"  advice {run['advice'].get('verdict', '-')}" if run.get("advice") else "")
        )
    lines.append(_policy_line(s))
    advice = s.get("advice") or {}
    if advice:
        lines.append(f"advice: {advice.get('verdict', '-')}: {advice.get('action', '')}")
        for name, value in sorted((advice.get("figures") or {}).items()):
            if name != "requests_per_s":  # shown once, above
                lines.append(f"  {name} = {_num(value)}")
    return lines


def _policy_line(status: dict[str, Any]) -> str:
    """The served policy, fleet-wide: the probe, the alarm, the versions withheld so far."""
    policy = (status.get("adapters") or {}).get("policy") or {}
    withheld = sum((policy.get("mismatches") or {}).values())
    line = f"served policy  probe {policy.get('probe', '-')}  withheld {withheld}"
    if policy.get("alarm"):
        line += ("  ALARM: a replica does not serve the policy the trainer trained (policy "
                 "column; /proxy/status adapters.policy)")  # fmt: skip
    return line


def _rate(snap: Snapshot) -> str:
    """One request rate, labelled with its window: the advisor's (``--advice-window``) when
    the proxy has one, else between two scrapes (since the start, on the first)."""
    figures = (snap.status.get("advice") or {}).get("figures") or {}
    rate, window = figures.get("requests_per_s"), figures.get("window_s")
    if rate is None or not window:
        rate, window = snap.figures.requests_per_s, snap.figures.seconds
    return f"{rate:.1f} req/s (last {window:.0f} s)"


REPLICA_COLUMNS = ("replica", "state", "inflight", "queue", "kv", "hit", "adapters", "policy")
DIGEST_SHOWN = 6  # hex characters of an adapter's content digest
STATE_STYLES = {"healthy": "green", "pending": "yellow", "draining": "yellow"}


def replica_rows(snap: Snapshot) -> list[tuple[str, ...]]:
    rows: list[tuple[str, ...]] = []
    hits = (snap.status.get("quality") or {}).get("replicas") or {}
    for r in snap.status.get("replicas", []):
        load = r.get("reported") or {}
        rid = str(r.get("id", "?"))
        rows.append(
            (
                rid,
                _state(r),
                str(r.get("inflight", 0)),
                _num(load.get("waiting")),
                _pct(load.get("kv_usage")),
                _pct(snap.figures.replica_hit_ratio.get(rid, hits.get(rid))),
                _adapters(r),
                _served(snap.status, rid),
            )
        )
    return rows


def _adapters(replica: dict[str, Any]) -> str:
    """The versions it is routed for, each with its content digest's prefix: ``v4@51e6ae``."""
    digests = replica.get("digests") or {}
    shown = [
        _short(name) + (f"@{digests[name][:DIGEST_SHOWN]}" if digests.get(name) else "")
        for name in replica.get("adapters", [])
    ]
    return ",".join(shown) or "-"


def _served(status: dict[str, Any], rid: str) -> str:
    """Its versions' served-policy states: ``ok`` when every one passed its probe, else each
    one that did not (``v5 probing``, ``v4 withheld``)."""
    policy = (status.get("adapters") or {}).get("policy") or {}
    held = (policy.get("replicas") or {}).get(rid) or {}
    other = [f"{_short(n)} {e.get('state')}" for n, e in held.items() if e.get("state") != "ok"]
    return ", ".join(other) or ("ok" if held else "-")


def _short(name: str) -> str:
    return name.rsplit("-", 1)[-1]


def _state(replica: dict[str, Any]) -> str:
    """A replica's state, and for one that is not healthy the proxy's reason (its last error)."""
    state, why = str(replica.get("state", "?")), replica.get("last_error")
    return f"{state} ({why})" if why and state != "healthy" else state


def plain(snap: Snapshot) -> str:
    """The ``--once`` snapshot: plain text, columns as wide as their widest cell."""
    rows: list[tuple[str, ...]] = [REPLICA_COLUMNS, *replica_rows(snap)]
    widths = [max(len(row[i]) for row in rows) for i in range(len(REPLICA_COLUMNS))]
    table = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
             for row in rows]  # fmt: skip
    return "\n".join([*summary_lines(snap), "", *table]) + "\n"


def rich_view(snap: Snapshot) -> Any:
    from rich.console import Group
    from rich.panel import Panel
    from rich.table import Table
    from rich.text import Text

    table = Table(expand=False)
    for column in REPLICA_COLUMNS:
        table.add_column(column, no_wrap=True, overflow="fold")
    for row in replica_rows(snap):
        state = row[1].split(" ", 1)[0]  # without the reason
        style = (
            "green"
            if state == "healthy"
            else "yellow"
            if state in ("pending", "draining")
            else "red"
        )
        table.add_row(*row, style=style)
    head = Text("\n".join(summary_lines(snap)))
    return Group(Panel(head, title="rollout-proxy top (q quits)"), table)


# -- the command ----------------------------------------------------------------------------------


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
                    live.update(rich_view(await reader.read(session)), refresh=True)
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
        print("rollout-proxy top: the live view needs rich: pip install 'rollout-proxy[top]' "
              "(or use --once)", file=sys.stderr)  # fmt: skip
        return 2
    return asyncio.run(_live(reader, args.interval))


def _yes(flag: object) -> str:
    return "yes" if flag else "no"
