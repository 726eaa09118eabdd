"""What ``top`` draws from a proxy's snapshot: the plain text of ``--once`` and the live screen.

``summary_lines`` and ``replica_rows`` say everything, in full (``plain``: ``--once``, every
line whole, whatever the terminal). The live view (``live_view``) must fit a small terminal
(80x24) with the replica table on screen: a compact head of at most ``HEAD_LINES`` lines, each
cut at the terminal's width (never wrapped), then the table, one line per replica (cells cut
with an ellipsis), then the rest (the warnings in full, rollouts, runs, the advisor's figures),
which the live display crops at the bottom when the screen is full.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from proxy.console.figures import Figures


@dataclass
class Snapshot:
    url: str
    status: dict[str, Any]
    figures: Figures


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
    lines.extend(f"warning: {w}" for w in s.get("warnings") or ())
    advice = s.get("advice") or {}
    if advice:
        lines.append(f"advice: {advice.get('verdict', '-')}: {advice.get('action', '')}")
        for name, value in sorted((advice.get("figures") or {}).items()):
            if name != "requests_per_s":  # shown once, above
                lines.append(f"  {name} = {_num(value)}")
    lines.extend(scaler_lines(s.get("scaler")))
    return lines


def scaler_lines(scaler: Any) -> list[str]:
    """The run's scaler's last decision (``/proxy/status``'s ``scaler``), in two lines: what it
    did and why, then the fleet's counts and the replica jobs it launched (none: no scaler)."""
    if not isinstance(scaler, dict):
        return []
    action = scaler.get("action", "-")
    did = "hold" if action == "hold" else f"{action} {scaler.get('count', '-')}"
    held = f" ({scaler['held_back']})" if scaler.get("held_back") else ""
    counts = scaler.get("replicas") or {}
    bounds = scaler.get("bounds") or {}
    scaled = ", ".join(
        f"{job.get('name', '?')} {job.get('state', '?')}" for job in scaler.get("scaled") or ()
    )
    return [
        f"scaler: {did} ({_num(scaler.get('age_s'))} s ago): {scaler.get('reason', '')}{held}",
        "  replicas wanted {wanted} ready {ready} starting {starting} draining {draining}".format(
            **{key: counts.get(key, "-") for key in ("wanted", "ready", "starting", "draining")}
        )
        + f"  range {bounds.get('min', '-')}..{bounds.get('max', '-')}  failed launches "
        f"{scaler.get('failed_launches', 0)}  scaled: {scaled or 'none'}",
    ]


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


def _yes(flag: object) -> str:
    return "yes" if flag else "no"


HEAD_LINES = 6  # the live view's lines above the replica table (at most)
STATE_WIDTH = 16  # the live table's state column (with its reason), at most
ADAPTERS_WIDTH = 16


def head_lines(snap: Snapshot) -> list[str]:
    """The live view's head: the summary, compact (each line is cut at the screen's width)."""
    s, f = snap.status, snap.figures
    replicas = s.get("replicas", [])
    routable = sum(1 for r in replicas if r.get("routable"))
    quality, syncs = s.get("quality") or {}, s.get("syncs") or {}
    states = "".join(
        f"  {word}" for word, on in (("SYNCING", syncs.get("open")), ("PAUSED", s.get("paused")))
        if on
    )  # fmt: skip
    lines = [
        f"rollout-proxy top (q quits)  {snap.url}  {s.get('policy', '-')}  "
        f"{routable}/{len(replicas)} routable  pid {s.get('pid', '-')}  "
        f"restarts {s.get('restarts', 0)}",
        f"in flight {s.get('inflight', 0)}/{s.get('max_inflight', '-')}  queued "
        f"{s.get('queued', 0)}  {_rate(snap)}  p50 {_ms(f.p50_s)} p99 {_ms(f.p99_s)}",
        f"hit {_pct(quality.get('hit_ratio', f.hit_ratio))}  available "
        f"{_pct(quality.get('available'))}  efficiency {_pct(quality.get('efficiency'))}  "
        f"syncs {syncs.get('count', 0)}  last {_num(syncs.get('last_s'))} s  paused "
        f"{_pct(syncs.get('paused_share'))}{states}",
        _policy_line(s),
    ]
    advice = s.get("advice") or {}
    if advice:
        lines.append(f"advice: {advice.get('verdict', '-')}: {advice.get('action', '')}")
    warnings = list(s.get("warnings") or ())
    if warnings:
        more = f" (+{len(warnings) - 1} more below)" if len(warnings) > 1 else ""
        lines.append(f"warning{more}: {warnings[0]}")
    return lines[:HEAD_LINES]


def live_view(snap: Snapshot) -> Any:
    """The live screen (module docstring): head, replica table, the rest."""
    from rich import box
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    rows = replica_rows(snap)
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, padding=0, expand=False)
    ids = max((len(row[0]) for row in rows), default=0)  # an id is never cut: the row's key
    for column in REPLICA_COLUMNS:
        width = {"state": STATE_WIDTH, "adapters": ADAPTERS_WIDTH}.get(column)
        table.add_column(
            column,
            no_wrap=True,
            overflow="ellipsis",
            max_width=width,
            min_width=ids if column == "replica" else None,
        )
    for row in rows:
        state = row[1].split(" ", 1)[0]  # without the reason
        table.add_row(*row, style=STATE_STYLES.get(state, "red"))
    head = Text("\n".join(head_lines(snap)), no_wrap=True, overflow="ellipsis")
    shown = set(head_lines(snap))
    rest = [line for line in summary_lines(snap)[1:] if line not in shown and _below(line)]
    return Group(head, table, Text("\n".join(rest), no_wrap=True, overflow="ellipsis"))


def _below(line: str) -> bool:
    """Lines of the full summary shown under the table (the head says the others)."""
    return line.startswith(("warning: ", "rollouts", "run ", "scaler: ", "  "))
