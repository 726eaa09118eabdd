"""A port the proxy cannot open: one line naming it, exit 2, and no restart under --supervise."""

from __future__ import annotations

import errno
import socket
import subprocess
import sys
from collections.abc import Iterator

import pytest

from proxy.http.listen import cannot_listen

RUN_BOUND_S = 60.0  # a start-up error ends in about a second; room for a busy machine


@pytest.fixture
def taken_port() -> Iterator[int]:
    """A loopback port this test holds open, as another proxy would."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


def run_proxy(*args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "proxy", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=RUN_BOUND_S)


@pytest.mark.parametrize("supervised", [(), ("--supervise",)], ids=["plain", "supervised"])
def test_a_port_in_use_is_one_line_and_exit_2_never_restarted(
    taken_port: int, supervised: tuple[str, ...]
) -> None:
    args = ("--replica-urls", "http://127.0.0.1:9", "--port", str(taken_port), *supervised)
    result = run_proxy(*args)

    assert result.returncode == 2, result.stderr
    assert result.stderr.splitlines() == [
        f"rollout-proxy: cannot listen on 127.0.0.1:{taken_port}: address already in use "
        "(another proxy running? pick another --port)"
    ]  # no traceback, no "Unclosed client session", no supervisor's "restart 1 in 0.5 s"
    assert "proxy ready" not in result.stdout


@pytest.mark.parametrize(
    ("admin", "hint"),
    [
        ((), "add some with --replica-urls\n"),
        (("--admin-key", "k"), "add some with --replica-urls or the admin API\n"),
    ],
    ids=["without-admin", "with-admin"],
)
def test_the_no_replica_hint_offers_the_admin_api_only_when_it_is_on(
    taken_port: int, admin: tuple[str, ...], hint: str
) -> None:
    result = run_proxy("--port", str(taken_port), *admin)

    assert result.returncode == 2
    assert f"WARNING proxy.fleet: no replicas configured: {hint}" in result.stderr


@pytest.mark.parametrize(
    ("code", "words"),
    [
        (errno.EACCES, "permission denied (ports below 1024 need privileges: pick another --port)"),
        (errno.EADDRNOTAVAIL, "address not available (--host must be an address of this machine)"),
    ],
)
def test_bind_errors_in_words(code: int, words: str) -> None:
    error = OSError(code, "error while attempting to bind")
    assert str(cannot_listen("10.1.2.3", 80, error)) == f"cannot listen on 10.1.2.3:80: {words}"


def test_a_host_that_does_not_resolve_is_named() -> None:
    error = socket.gaierror(socket.EAI_NONAME, "Name or service not known")
    assert str(cannot_listen("gpu-9", 9100, error)) == (
        "cannot listen on gpu-9:9100: --host gpu-9 does not resolve (Name or service not known)"
    )
