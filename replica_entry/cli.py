"""``rollout-replica --backend {sim,vllm} ...`` (``python -m replica_entry``): run a replica until
SIGTERM/SIGINT.

``--backend vllm`` hands the whole command line to ``replica_entry.vllm_backend`` (its own flags,
see ``--backend vllm --help``). The rest of this module is the simulated replica's command line.

Flags map one to one onto ``SimSettings`` fields (``--max-model-len`` -> ``max_model_len``,
fault flags -> ``faults``); a value the settings reject exits 2 with a message naming the flag,
as argparse does for a malformed one. Once listening, one line
``replica ready on http://HOST:PORT (model NAME)`` goes to stdout. A replica that cannot start
(its port taken, its ``--host`` not of this machine, its adapter store refused) says why in one
line and exits 2.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from collections.abc import Callable, Sequence
from typing import Any

from aiohttp import web
from pydantic import ValidationError

from adapter_receiver.store import StoreError
from proxy.config.deprecated import DeprecatedNames
from proxy.config.programs import DefaultsFormatter, EnvDefault, OneLineParser, version_flag
from proxy.config.units import DurationArg, SizeArg
from proxy.http.listen import CannotListen, cannot_listen
from replica_entry.sim import Faults, SimSettings, build_sim_app
from replica_entry.vllm_backend import BACKENDS

PROG = "rollout-replica"
SECONDS = DurationArg()  # a flag named -s: a bare number is seconds, 50ms too

_FAULT_FLAGS = ("unhealthy", "delay_s", "fail_status", "drop_mid_response", "mount_lag_s")


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog=PROG,
        description="Run a replica (sim: the simulated one) until SIGTERM/SIGINT.",
        formatter_class=DefaultsFormatter,
    )
    version_flag(parser)
    add = parser.add_argument
    # `--backend vllm` never reaches this parser (see main); it is listed all the same.
    add(
        "--backend",
        required=True,
        choices=BACKENDS,
        help="sim; `--backend vllm` has its own flags (see `--backend vllm --help`)",
    )
    add("--host", default="127.0.0.1", help="address to listen on")
    add("--port", type=int, default=8000, help="port to listen on (0: a free one)")
    add(
        "--served-model-name",
        "--model",
        action=DeprecatedNames,
        deprecated={"--model": "--model is the Hub id or folder vLLM loads with --backend vllm"},
        dest="model",
        default="sim-model",
        help="the name clients ask for (as --backend vllm's flag)",
    )
    add("--max-model-len", type=int, default=4096, help="prompt plus completion tokens")
    add("--max-loras", type=int, default=6, help="adapters loaded at once")
    add("--max-lora-rank", type=int, default=8, help="largest adapter rank it loads")
    add("--max-cpu-loras", type=int, default=None, help="adapters cached in CPU memory")
    add("--block-size", type=int, default=16, help="tokens per KV block")
    add("--cache-blocks", type=int, default=4096, help="prefix cache capacity in blocks")
    add("--max-num-seqs", type=int, default=0, help="requests run at once; more wait (0: any)")
    add("--kv-blocks", type=int, default=0, help="KV blocks running requests may hold (0: any)")
    add("--api-key", action=EnvDefault, env="VLLM_API_KEY", help="bearer key clients must send")
    add("--seed", type=int, default=0, help="seed of the generated tokens")
    add("--prompt-token-s", type=SECONDS, default=0.0, help="time per uncached prompt token")
    add("--gen-token-s", type=SECONDS, default=0.0, help="time per generated token")
    add("--overhead-s", type=SECONDS, default=0.0, help="time per request")
    add("--batch-factor", type=float, default=0.0, help="slowdown per other running request")
    add(
        "--later-version",
        type=int,
        default=None,
        help="from this adapter version on (trl-policy-vN, N at least this), --later-gen-token-s "
        "per generated token: completions that shrink or grow as the run trains",
    )
    add(
        "--later-gen-token-s",
        type=SECONDS,
        default=None,
        help="time per generated token from --later-version on",
    )
    add("--vocab-size", type=int, default=1000, help="token ids it generates from")
    receiver = parser.add_argument_group("adapter receiver (pushed adapters)")
    receiver.add_argument(
        "--adapter-receiver",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="the adapter receiver routes (off: the proxy loads from the mount)",
    )
    receiver.add_argument(
        "--adapter-store",
        default=None,
        help="store directory, emptied at start (default: a fresh one)",
    )
    receiver.add_argument(
        "--adapter-max-bytes", type=SizeArg(), default=1 << 30, help="largest adapter it takes"
    )
    receiver.add_argument(
        "--adapter-store-max-bytes", type=SizeArg(), default=8 << 30, help="all the store holds"
    )
    faults = parser.add_argument_group("faults")
    faults.add_argument("--unhealthy", action="store_true", help="/health answers 503")
    faults.add_argument(
        "--delay-s", type=SECONDS, default=0.0, help="extra time before a generation starts"
    )
    faults.add_argument(
        "--fail-status", type=int, default=None, help="generation routes answer this status"
    )
    faults.add_argument(
        "--drop-mid-response",
        action="store_true",
        help="generations close the connection mid-answer",
    )
    faults.add_argument(
        "--mount-lag-s", type=SECONDS, default=0.0, help="time a new adapter takes to appear"
    )
    return parser


def settings_from_args(args: argparse.Namespace, parser: argparse.ArgumentParser) -> SimSettings:
    """Build the settings; a rejected value exits 2 naming its flag."""
    values: dict[str, Any] = dict(vars(args))
    for name in ("backend", "host", "port"):
        values.pop(name)
    try:
        faults = Faults(**{name: values.pop(name) for name in _FAULT_FLAGS})
        return SimSettings(**values, faults=faults)
    except ValidationError as exc:
        error = exc.errors(include_url=False)[0]
        flag = "--" + str(error["loc"][-1]).replace("_", "-")
        parser.error(f"argument {flag}: {error['msg']} (got {error['input']!r})")


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if _backend(argv) == "vllm":
        from replica_entry import vllm_backend

        return vllm_backend.main(argv)
    parser = build_parser()
    args = parser.parse_args(argv)
    if not 0 <= args.port <= 65535:
        parser.error(f"argument --port: must be in 0..65535 (got {args.port})")
    settings = settings_from_args(args, parser)
    try:
        with asyncio.Runner(loop_factory=_loop_factory()) as runner:
            runner.run(serve(build_sim_app(settings), args.host, args.port, settings.model))
    except (CannotListen, StoreError) as exc:  # at start: one line, nothing was served
        print(f"{PROG}: {exc}", file=sys.stderr)
        return 2
    return 0


def _backend(argv: Sequence[str]) -> str | None:
    """The ``--backend`` value, whatever else the command line holds (before any ``--``)."""
    peek = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    peek.add_argument("--backend")
    known, _ = peek.parse_known_args(list(argv)[: list(argv).index("--")] if "--" in argv else argv)
    backend: str | None = known.backend
    return backend


async def serve(app: web.Application, host: str, port: int, model: str) -> None:
    """Serve ``app`` until SIGTERM or SIGINT, then stop cleanly. ``CannotListen`` when the
    port cannot be opened, ``StoreError`` when the adapter store is refused (at start)."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    runner = web.AppRunner(app, handle_signals=False, access_log=None)
    await runner.setup()
    try:
        site = web.TCPSite(runner, host, port)
        try:
            await site.start()
        except OSError as exc:
            raise cannot_listen(host, port, exc, server="replica") from None
        bound = runner.addresses[0][1] if runner.addresses else port
        print(f"replica ready on http://{host}:{bound} (model {model})", flush=True)
        await stop.wait()
    finally:
        await runner.cleanup()


def _loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop's loop when it is installed: the simulated fleet runs many replicas per core."""
    try:
        import uvloop
    except ImportError:
        return None
    factory: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
    return factory


if __name__ == "__main__":
    sys.exit(main())
