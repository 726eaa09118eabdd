"""The trainer's sidecar proxy reaches replicas that demand a bearer token (as HF Jobs' exposed
ports do) with nothing but ``HF_TOKEN`` in the trainer's environment, and the token never shows
on a command line or in the output."""

from __future__ import annotations

import json
import logging
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from replica_entry.sim import SimSettings, build_sim_app
from tests.deploy.conftest import TOKEN
from tests.support.background import BackgroundServers
from tests.support.hub_jobs import require_bearer
from trainer_entry import sidecar
from trainer_entry.cli import proxy_for
from trainer_entry.flags import build_parser, options_from_args

FAST = ("--proxy-arg=--health-interval=0.05", "--proxy-arg=--health-timeout=1")


def _status(base_url: str) -> dict[str, Any]:
    with urllib.request.urlopen(f"{base_url}/proxy/status", timeout=5) as response:
        status: dict[str, Any] = json.loads(response.read())
        return status


def _decided(base_url: str, timeout_s: float = 20.0) -> dict[str, Any]:
    """The replica's entry in ``/proxy/status`` once the proxy has judged it (routable, or an
    error recorded). Bounded: the proxy probes every 50 ms."""
    deadline = time.monotonic() + timeout_s
    while True:
        replica: dict[str, Any]
        (replica,) = _status(base_url)["replicas"]
        if replica["routable"] or replica["last_error"]:
            return replica
        assert time.monotonic() < deadline, f"the proxy never judged the replica: {replica}"
        time.sleep(0.05)


def _options(tmp_path: Path, replica: str, *extra: str) -> Any:
    parser = build_parser()
    argv = [
        *("--model", "m", "--dataset", "d.jsonl", "--output-dir", str(tmp_path / "run")),
        *("--sidecar-replicas", replica, *FAST, *extra),
    ]
    return options_from_args(parser.parse_args(argv), parser)


def test_the_sidecar_sends_hf_token_to_the_replicas(
    tmp_path: Path,
    servers: BackgroundServers,
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="trainer_entry")
    replica = servers.start(require_bearer(build_sim_app(SimSettings()), TOKEN))
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    monkeypatch.delenv("PROXY_UPSTREAM_TOKEN", raising=False)
    launched: list[list[str]] = []
    real_running = sidecar.running

    def running(argv: list[str], **kwargs: Any) -> Any:
        launched.append(list(argv))
        return real_running(argv, **kwargs)

    monkeypatch.setattr(sidecar, "running", running)

    with proxy_for(_options(tmp_path, replica)) as url:
        state = _decided(url)

    assert state["routable"] is True, state
    assert launched and all(TOKEN not in arg for arg in launched[0])
    out = capfd.readouterr()
    assert TOKEN not in out.out + out.err + caplog.text
    assert "sends the bearer token from $HF_TOKEN to the replicas" in caplog.text


def test_without_the_token_the_sidecar_says_why_replicas_refuse(
    tmp_path: Path,
    servers: BackgroundServers,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    replica = servers.start(require_bearer(build_sim_app(SimSettings()), TOKEN))
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.delenv("PROXY_UPSTREAM_TOKEN", raising=False)

    with proxy_for(_options(tmp_path, replica)) as url:
        state = _decided(url)

    assert state["routable"] is False and "401" in state["last_error"]
    assert "$HF_TOKEN is not set" in caplog.text


def test_listening_on_every_interface_trl_talks_to_loopback() -> None:
    assert sidecar.local_url("http://0.0.0.0:8000") == "http://127.0.0.1:8000"
    assert sidecar.local_url("http://127.0.0.1:4711") == "http://127.0.0.1:4711"


def test_a_remote_proxy_is_always_reached_through_a_local_relay(
    tmp_path: Path, servers: BackgroundServers, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without a token too: the relay is what pushes each adapter version into the remote
    proxy before it forwards TRL's load (the remote proxy has no mount of the trainer's)."""
    remote = servers.start(build_sim_app(SimSettings()))  # stands for the remote proxy
    monkeypatch.delenv("PROXY_UPSTREAM_TOKEN", raising=False)
    launched: list[list[str]] = []
    real_running = sidecar.running

    def running(argv: list[str], **kwargs: Any) -> Any:
        launched.append(list(argv))
        return real_running(argv, **kwargs)

    monkeypatch.setattr(sidecar, "running", running)
    parser = build_parser()
    argv = [
        *("--model", "m", "--dataset", "d.jsonl", "--output-dir", str(tmp_path / "run")),
        *("--proxy-url", remote, *FAST),
    ]
    with proxy_for(options_from_args(parser.parse_args(argv), parser)) as url:
        assert url != remote
        assert _decided(url)["routable"] is True
    (relay,) = launched
    assert relay[relay.index("--replicas") + 1] == remote
