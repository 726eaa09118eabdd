"""Command line: argv + environment + config file -> Settings -> uvloop -> serve until SIGTERM.

Exit codes: 0 after a clean shutdown, 2 for a bad setting (the message names the field, the value
and what is allowed) or a port that cannot be opened.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import signal
import sys
from collections.abc import Sequence
from typing import Any

from pydantic import ValidationError

from proxy.app import build_app
from proxy.app import serve as serve_app
from proxy.config import Settings, env_name, flat_fields, flat_name, hide_credentials
from proxy.fleet.startup import warn_at_start
from proxy.http.server import CannotListen, raise_fd_limit
from proxy.http.tracing import OtelMissing, require_otel, tracer_from_environment
from proxy.logs import configure_logging
from proxy.supervise import supervise

_HELP = {
    "replicas": "comma-separated replica base URLs (http:// or https://)",
    "upstream_token": "bearer token added to every upstream request (HF Jobs ports need one)",
    "api_key": "key clients must send as 'Authorization: Bearer KEY' (all routes but /health)",
    "admin_key": "key for the /admin API (disabled when unset)",
    "config": "TOML or JSON file of settings (flat names, as the flags without dashes)",
    "max_inflight": "overall in-flight cap (default: per-replica cap x replicas)",
    "replica_hosts": "host patterns the admin API may add as replicas, comma-separated "
    "(default: the configured replicas' domains, *.hf.jobs when discovering, loopback if local)",
    "discover": "also take replicas from hf-jobs:LABEL=VALUE (RUNNING jobs' exposed URLs) or "
    "dns:NAME:PORT (every address NAME resolves to)",
    "hub_endpoint": "Hub API endpoint (default: huggingface_hub's, i.e. HF_ENDPOINT)",
    "policy": "routing policy: prefix (default), least_loaded or round_robin",
    "load_factor": "prefix policy: spill above this x the mean load (and the slack)",
    "load_slack": "prefix policy: ... and this many requests' work over the least-loaded replica",
    "load_interval": "seconds between scrapes of each replica's /metrics load figures (0: off)",
    "kv_high": "a replica reporting this KV-cache usage (0-1) is full: new work goes elsewhere",
    "waiting_high": "... as is one reporting this many waiting, two scrapes in a row (8)",
    "otel_spans": "OpenTelemetry spans (queue, route, upstream) to OTEL_EXPORTER_OTLP_ENDPOINT "
    "(needs the otel extra)",
    "access_log": "log one line per request: its X-Request-ID, method, path, status, replica, time",
    "supervise": "run the proxy as a child process and restart it on the same port if it dies",
    "adapters_local": "the directory TRL saves adapter versions into on this machine (with "
    "--adapters-mirror): pushed from there, each copied into the mirror in the background",
    "adapters_mirror": "the bucket directory each version in --adapters-local is copied into "
    "(TRL's <output-dir>/.vllm_lora); replicas without a receiver load from there",
    "forward_pause": "send TRL's /pause and /resume to every replica, freezing the fleet for each "
    "weight sync (default: the proxy answers them itself and the fleet keeps generating; "
    "LoRA syncs need no freeze)",
}

log = logging.getLogger("proxy")


def parse_args(argv: Sequence[str]) -> dict[str, Any]:
    """Parse flags into a dict holding only the settings the user gave."""
    parser = argparse.ArgumentParser(
        prog="rollout-proxy",
        description="Routing proxy in front of N vLLM replicas. Every flag is also an environment "
        "variable (PROXY_<NAME>) and a config-file setting.",
    )
    for name in flat_fields():
        flag = "--" + name.replace("_", "-")
        help_text = f"{_HELP.get(name, '')} [env {env_name(name)}]".strip()
        if name in (
            "tls_verify",
            "supervise",
            "forward_pause",
            "access_log",
            "otel_spans",
            "adapter_push",
        ):
            parser.add_argument(
                flag, action=argparse.BooleanOptionalAction, default=None, help=help_text
            )
        else:
            parser.add_argument(flag, dest=name, default=None, metavar="VALUE", help=help_text)
    given = vars(parser.parse_args(list(argv)))
    return {key: value for key, value in given.items() if value is not None}


_SECRET_FIELDS = {"api_key", "admin_key", "upstream_token", "token"}


def describe_error(error: ValidationError) -> str:
    """One line per bad field: the flag, the env var, the value (masked if secret), the rule."""
    lines = []
    for item in error.errors(include_url=False):
        loc = tuple(str(part) for part in item["loc"])
        flat = flat_name(loc)
        given = item.get("input")
        if flat == "policy" and isinstance(given, dict):
            given = given.get("kind")
        shown = "***" if flat in _SECRET_FIELDS else hide_credentials(repr(given))
        message = hide_credentials(item["msg"])
        if loc[0] == "policy" and item["type"] == "extra_forbidden":
            message = "this setting applies only to --policy prefix"
        flag = "--" + flat.replace("_", "-")
        lines.append(f"invalid setting {flag} ({env_name(flat)}): got {shown}: {message}")
    return "\n".join(lines)


def load_settings(argv: Sequence[str]) -> Settings:
    """Settings from argv/env/file; raises SystemExit(2) with a clear message on a bad value."""
    given = parse_args(argv)
    try:
        return Settings(**given)
    except ValidationError as exc:
        print(f"rollout-proxy: {describe_error(exc)}", file=sys.stderr)
        raise SystemExit(2) from None
    except ValueError as exc:  # config file problems
        print(f"rollout-proxy: {exc}", file=sys.stderr)
        raise SystemExit(2) from None


async def serve(settings: Settings) -> None:
    """Run until SIGTERM/SIGINT, then stop accepting and let in-flight requests finish."""
    app = build_app(settings, tracer=tracer_from_environment() if settings.otel_spans else None)
    host, port = settings.host, settings.port
    async with serve_app(
        app, host=host, port=port, shutdown_timeout=settings.shutdown_timeout
    ) as url:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        log.info("rollout-proxy listening on %s with %d replica(s)", url, len(settings.replicas))
        print(f"proxy ready on {url}", flush=True)
        await stop.wait()
        log.info(
            "shutting down: finishing in-flight requests (up to %.0f s)", settings.shutdown_timeout
        )
    log.info("shutdown complete")


GC_THRESHOLD = 20_000  # young-generation allocations between collections (CPython's default: 700)


def tune_gc() -> None:
    """Fewer, cheaper garbage collections: what exists at start (modules, settings) is moved out
    of the collector's view, and the young generation is collected every ``GC_THRESHOLD``
    allocations instead of 700 (a request allocates a few hundred objects, freed by reference
    counting; cycles are rare on the request path)."""
    gc.collect()
    gc.freeze()
    _, second, third = gc.get_threshold()
    gc.set_threshold(GC_THRESHOLD, second, third)


def main(argv: Sequence[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else list(argv)
    if args[:1] == ["top"]:  # rollout-proxy top [URL]: look at a running proxy
        from proxy.console.top import main as top

        return top(args[1:])
    settings = load_settings(args)
    configure_logging(settings)
    if settings.otel_spans:
        try:
            require_otel()
        except OtelMissing as exc:
            print(f"rollout-proxy: {exc}", file=sys.stderr)
            return 2
    if settings.supervise:
        if settings.port == 0:
            print("rollout-proxy: --supervise needs a fixed --port", file=sys.stderr)
            return 2
        return supervise(args)
    soft, _ = raise_fd_limit()
    needed = settings.client.max_connections + 2 * settings.limits.max_inflight_per_replica * max(
        len(settings.replicas), 1
    )
    if soft < needed:
        log.warning(
            "the open-files limit is %d, below the %d that --max-client-connections and the "
            "replicas' connections may need: raise it (ulimit -n) or lower "
            "--max-client-connections",
            soft,
            needed,
        )
    warn_at_start(settings)
    tune_gc()
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a core dependency
        run = asyncio.run
    else:
        run = uvloop.run
    try:
        run(serve(settings))
    except CannotListen as exc:  # exit 2: the supervisor does not restart it
        print(f"rollout-proxy: {exc}", file=sys.stderr)
        return 2
    return 0
