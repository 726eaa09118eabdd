"""The proxy next to the trainer, as a child process on localhost.

Two uses, one mechanism (``python -m proxy`` with ``--host 127.0.0.1`` and a free port):

- sidecar: the proxy in front of the replicas, watching the directory TRL saves adapters into
  (``--adapters-dir``) so new versions reach every replica as soon as they are written, and
  sending the bearer token the replicas demand (HF Jobs' exposed ports answer 401 without one),
  taken from the trainer's ``HF_TOKEN`` and passed as the child's ``PROXY_UPSTREAM_TOKEN``;
- relay: the proxy in front of ONE remote proxy. It pushes each adapter version TRL saves into
  the remote proxy's receiver before forwarding TRL's load (the remote proxy pushes on to the
  replicas), and with a token adds ``Authorization: Bearer <token>`` on every request (TRL's
  clients cannot send headers; exposed HF Job ports demand a token). The token travels in the
  child's environment (``PROXY_UPSTREAM_TOKEN``), never on its command line.

Either way, when TRL saves on the trainer's disk (``trainer_entry.lora_dir``), the proxy is told
so (``mirror_args``): ``--adapters-local`` that directory, ``--adapters-mirror`` TRL's
``<output_dir>/.vllm_lora`` in the bucket, where it copies each version behind the sync
(``proxy.adapters.mirror``); the sidecar watches the local directory.

``running(...)`` starts the child, waits for its ``proxy ready on URL`` line, copies its output
to ours with a ``[proxy]`` prefix (so its pipe never fills), and stops it on exit: SIGTERM, then
SIGKILL after a grace period. If the trainer itself is killed, the kernel SIGKILLs the child
(``proxy.lifeline``), whose supervisor's proxy goes the same way: the port is free at once.
"""

from __future__ import annotations

import logging
import os
import selectors
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlsplit

from proxy.lifeline import preexec

log = logging.getLogger("trainer_entry")

READY_PREFIX = "proxy ready on "


class ProxyNotReady(RuntimeError):
    """The local proxy ended, or did not say it was ready in time; its output says why."""


STOP_GRACE_S = 30.0


def free_port() -> int:
    """A TCP port free on loopback right now (the kernel's pick)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def sidecar_command(
    replicas: Sequence[str],
    port: int,
    adapters_dir: Path,
    extra: Sequence[str] = (),
    host: str = "127.0.0.1",
    discover: str | None = None,
) -> list[str]:
    """The proxy in front of ``replicas`` (or those its ``--discover`` spec ``discover``
    finds), watching ``adapters_dir``, prefix routing; supervised, so a proxy that dies is
    restarted on the same port while the trainer keeps going."""
    where = ("--discover", discover) if discover else ("--replica-urls", ",".join(replicas))
    return [
        *(sys.executable, "-m", "proxy", *where),
        *("--host", host, "--port", str(port)),
        *("--adapters-dir", str(adapters_dir), "--policy", "prefix", "--supervise"),
        *extra,
    ]


def mirror_args(local: Path | None, bucket: Path) -> list[str]:
    """The proxy's flags for adapters TRL saves into ``local`` (none: straight into the
    bucket), to be copied into ``bucket`` (``<output_dir>/.vllm_lora``)."""
    if local is None:
        return []
    return ["--adapters-local", str(local), "--adapters-mirror", str(bucket)]


UPSTREAM_TOKEN = "PROXY_UPSTREAM_TOKEN"
WILDCARD_HOSTS = ("0.0.0.0", "[::]", "::")


def local_url(ready_url: str) -> str:
    """The URL to reach a proxy on this machine: its own, or loopback if it listens on all."""
    scheme, _, rest = ready_url.partition("://")
    host, _, port = rest.rpartition(":")
    return f"{scheme}://127.0.0.1:{port}" if host in WILDCARD_HOSTS else ready_url


LOOPBACK_HOSTS = ("localhost", "::1")


def on_this_machine(replicas: Sequence[str]) -> bool:
    """Whether every one of ``replicas`` (URLs; none: found by name, so unknown) is on this
    machine's loopback, where no edge demands a token."""
    hosts = [urlsplit(url).hostname or "" for url in replicas]
    return bool(hosts) and all(h in LOOPBACK_HOSTS or h.startswith("127.") for h in hosts)


def upstream_token_env(
    environ: Mapping[str, str], variable: str, local: bool = False
) -> dict[str, str]:
    """The environment the sidecar needs for its upstream token: ``$variable`` as
    ``PROXY_UPSTREAM_TOKEN``, unless that is set already (an explicit choice wins). Says which
    token goes upstream (never its value), or why the replicas will refuse the proxy: a warning
    unless every replica is on this machine (``local``: ``on_this_machine``)."""
    if environ.get(UPSTREAM_TOKEN):
        log.info("the sidecar proxy sends the bearer token from $%s", UPSTREAM_TOKEN)
        return {}
    token = environ.get(variable)
    if not token and local:
        log.info("$%s is not set: the sidecar proxy sends no bearer token (its replicas are on "
                 "this machine's loopback)", variable)  # fmt: skip
        return {}
    if not token:
        log.warning(
            "$%s is not set: the sidecar proxy sends no bearer token, and replicas behind HF "
            "Jobs' exposed ports will answer 401; set %s to a token with read access to the "
            "replicas' namespace (deploy passes it as a job secret)",
            variable,
            variable,
        )
        return {}
    log.info("the sidecar proxy sends the bearer token from $%s to the replicas", variable)
    return {UPSTREAM_TOKEN: token}


def relay_command(upstream: str, port: int, extra: Sequence[str] = ()) -> list[str]:
    """The proxy in front of one remote proxy (the token comes from the environment). It
    answers TRL's pause and resume itself, as every proxy does: one round trip less per sync.
    Supervised, as the sidecar is: a relay that dies is restarted on the same socket."""
    return [
        *(sys.executable, "-m", "proxy", "--replica-urls", upstream),
        *("--host", "127.0.0.1", "--port", str(port), "--supervise"),
        *extra,
    ]


@contextmanager
def running(
    argv: Sequence[str], env: Mapping[str, str] | None = None, ready_timeout_s: float = 60.0
) -> Iterator[str]:
    """Run the proxy ``argv``; yields its base URL once it says it is ready."""
    child = subprocess.Popen(
        list(argv),
        env=child_environment(os.environ, env or {}),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        preexec_fn=preexec(signal.SIGKILL),  # a SIGKILLed trainer leaves no proxy on its port
    )
    assert child.stdout is not None
    fd = child.stdout.fileno()
    try:
        url, rest = _await_ready(child, fd, ready_timeout_s)
        log.info("proxy (pid %d) ready on %s", child.pid, url)
        threading.Thread(target=_copy, args=(fd, rest), daemon=True).start()
        yield url
    finally:
        _stop(child)


def child_environment(environ: Mapping[str, str], extra: Mapping[str, str]) -> dict[str, str]:
    """The trainer's environment for its proxy, less the ``PROXY_*`` variables the proxy knows
    no setting by: each is named in one line, with the closest setting, instead of stopping the
    run at start (the proxy refuses them when a user starts it, rightly; beside a trainer, a
    variable of the user's that only looks like one would end the run)."""
    from proxy.config import accepted_names, unknown_variables

    merged = {**environ, **extra}
    for variable, line in unknown_variables(accepted_names(), merged).items():
        log.warning("%s (not passed to the sidecar proxy)", line)
        del merged[variable]
    return merged


def _await_ready(child: subprocess.Popen[bytes], fd: int, timeout_s: float) -> tuple[str, bytes]:
    """Echo the child's lines until the ready line; returns its URL and any bytes read past it.
    Reads the raw descriptor: a buffered reader could hold the ready line while select waits."""
    deadline = time.monotonic() + timeout_s
    pending = b""
    with selectors.DefaultSelector() as selector:
        selector.register(fd, selectors.EVENT_READ)
        while (left := deadline - time.monotonic()) > 0:
            if not selector.select(left):
                break
            chunk = os.read(fd, 65536)
            if not chunk:
                raise ProxyNotReady(
                    f"the local proxy exited with code {child.wait()} before it was ready (its "
                    "last line, above, says why)"
                )
            pending += chunk
            while b"\n" in pending:
                raw, pending = pending.split(b"\n", 1)
                line = raw.decode(errors="replace")
                print(f"[proxy] {line}", flush=True)
                if line.startswith(READY_PREFIX):
                    return line.removeprefix(READY_PREFIX).split()[0], pending
    raise ProxyNotReady(f"the local proxy was not ready within {timeout_s:g} s (its lines above)")


def _copy(fd: int, pending: bytes) -> None:
    while True:
        while b"\n" in pending:
            raw, pending = pending.split(b"\n", 1)
            print(f"[proxy] {raw.decode(errors='replace')}", flush=True)
        try:
            chunk = os.read(fd, 65536)
        except OSError:
            return
        if not chunk:
            return
        pending += chunk


def _stop(child: subprocess.Popen[bytes]) -> None:
    if child.poll() is None:
        child.terminate()
        try:
            child.wait(STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
    if child.stdout is not None:
        child.stdout.close()  # the copying thread sees EOF or EBADF and ends
