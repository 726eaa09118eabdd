"""Command line: argv + environment + config file -> Settings -> uvloop -> serve until SIGTERM.

Exit codes: 0 after a clean shutdown, 2 for a bad setting (the message names where it was given,
the value and what is allowed), a ``PROXY_*`` variable that is no setting, a directory that
cannot work (``config.paths``), a port that cannot be opened, or an adapter store that is
refused (each said in one line). A deprecated name (``--replicas``, its variable and file key:
``config.deprecated``) and Kubernetes' service links (``config.service_links``) are said in one
line each, and start.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import signal
import sys
from collections.abc import Sequence
from typing import Any

from pydantic import ValidationError

from adapter_receiver.store import StoreError
from proxy.app import build_app
from proxy.app import serve as serve_app
from proxy.config import Settings, build_parser, describe_error, origins
from proxy.config.paths import path_problem
from proxy.config.service_links import service_links
from proxy.config.settings import ALIASES, DEPRECATED, accepted_names
from proxy.config.sources import PREFIX, deprecated_uses
from proxy.fleet.startup import warn_at_start
from proxy.http.listen import CannotListen, listening_socket
from proxy.http.server import raise_fd_limit
from proxy.http.tracing import OtelMissing, require_otel, tracer_from_environment
from proxy.logs import configure_logging
from proxy.supervise import LISTEN_FD_ENV, inherited_socket, supervise

log = logging.getLogger("proxy")


def parse_args(argv: Sequence[str]) -> dict[str, Any]:
    """Parse flags (``proxy.config.flags``: one per setting) into the settings the user gave."""
    given = vars(build_parser().parse_args(list(argv)))
    return {key: value for key, value in given.items() if value is not None}


def load_settings(argv: Sequence[str]) -> Settings:
    """Settings from argv/env/file; raises SystemExit(2) with a clear message on a bad value."""
    given = parse_args(argv)
    try:
        settings = Settings(**given)
    except ValidationError as exc:
        print(f"rollout-proxy: {describe_error(exc, origins(given))}", file=sys.stderr)
        raise SystemExit(2) from None
    except ValueError as exc:  # an unknown variable, config file problems
        print(f"rollout-proxy: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    if LISTEN_FD_ENV not in os.environ:  # said by a supervisor once, not again by its children
        for line in deprecated_uses(
            os.environ, settings.config, accepted_names(), ALIASES, DEPRECATED
        ):
            print(line, file=sys.stderr)
    return settings


async def serve(settings: Settings) -> None:
    """Run until SIGTERM/SIGINT, then stop accepting and let in-flight requests finish."""
    app = build_app(settings, tracer=tracer_from_environment() if settings.otel_spans else None)
    host, port = settings.host, settings.port
    async with serve_app(
        app,
        host=host,
        port=port,
        shutdown_timeout=settings.shutdown_timeout,
        sock=inherited_socket(),
    ) as url:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        log.info(
            "rollout-proxy listening on %s with %d replica(s)", url, len(settings.replica_urls)
        )
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
    if problem := path_problem(settings):
        print(f"rollout-proxy: {problem}", file=sys.stderr)
        return 2
    configure_logging(settings)
    if links := service_links(os.environ, PREFIX):
        log.info(
            "ignoring Kubernetes' service-link variables %s (not settings; a pod spec's "
            "enableServiceLinks: false keeps them out)",
            ", ".join(links),
        )
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
        try:
            listener = listening_socket(settings.host, settings.port)
        except CannotListen as exc:
            print(f"rollout-proxy: {exc}", file=sys.stderr)
            return 2
        return supervise(args, listener)
    soft, _ = raise_fd_limit()
    needed = settings.client.max_connections + 2 * settings.limits.max_inflight_per_replica * max(
        len(settings.replica_urls), 1
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
    except (CannotListen, StoreError) as exc:  # exit 2: the supervisor does not restart it
        print(f"rollout-proxy: {exc}", file=sys.stderr)
        return 2
    return 0
