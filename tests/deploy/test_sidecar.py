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
from tests.support.bearer import require_bearer
from trainer_entry import sidecar
from trainer_entry.cli import proxy_for
from trainer_entry.flags import build_parser
from trainer_entry.freeze import options_from_args

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


def _launches(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """Every proxy command the trainer starts, recorded (and started as it would be)."""
    launched: list[list[str]] = []
    real_running = sidecar.running

    def running(argv: list[str], **kwargs: Any) -> Any:
        launched.append(list(argv))
        return real_running(argv, **kwargs)

    monkeypatch.setattr(sidecar, "running", running)
    return launched


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
    launched = _launches(monkeypatch)

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
    caplog.set_level(logging.INFO, logger="trainer_entry")
    replica = servers.start(require_bearer(build_sim_app(SimSettings()), TOKEN))
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.delenv("PROXY_UPSTREAM_TOKEN", raising=False)

    with proxy_for(_options(tmp_path, replica)) as url:
        state = _decided(url)

    assert state["routable"] is False and "401" in state["last_error"]
    # A replica on this machine's loopback needs no token as a rule: said, not warned
    # (tests/unit/test_startup_errors.py: a replica elsewhere is warned about).
    assert "$HF_TOKEN is not set" in caplog.text
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


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
    launched = _launches(monkeypatch)
    parser = build_parser()
    argv = [
        *("--model", "m", "--dataset", "d.jsonl", "--output-dir", str(tmp_path / "run")),
        *("--proxy-url", remote, *FAST),
    ]
    with proxy_for(options_from_args(parser.parse_args(argv), parser)) as url:
        assert url != remote
        assert _decided(url)["routable"] is True
    (relay,) = launched
    assert relay[relay.index("--replica-urls") + 1] == remote


def _landed(path: Path, timeout_s: float = 20.0) -> None:
    """Until ``path`` is a directory (the mirror renames it into place whole). Bounded."""
    deadline = time.monotonic() + timeout_s
    while not path.is_dir():
        assert time.monotonic() < deadline, f"{path} never landed"
        time.sleep(0.05)


@pytest.mark.parametrize("topology", ["sidecar", "relay"])
def test_the_local_proxy_mirrors_what_trl_saves_locally_into_the_bucket(
    topology: str, tmp_path: Path, servers: BackgroundServers, monkeypatch: pytest.MonkeyPatch
) -> None:
    """TRL saves on the trainer's disk (``--adapters-local``); the sidecar or the relay is told
    where the bucket's ``.vllm_lora`` is and copies each version there."""
    from tests.support.adapters import write_adapter

    upstream = servers.start(build_sim_app(SimSettings()))
    monkeypatch.delenv("PROXY_UPSTREAM_TOKEN", raising=False)
    launched = _launches(monkeypatch)
    local, bucket = tmp_path / "disk", tmp_path / "run" / ".vllm_lora"
    local.mkdir()
    where = ("--sidecar-replicas",) if topology == "sidecar" else ("--proxy-url",)
    parser = build_parser()
    argv = [
        *("--model", "m", "--dataset", "d.jsonl", "--output-dir", str(tmp_path / "run")),
        *(*where, upstream, *FAST, "--adapters-local", str(local)),
    ]
    with proxy_for(options_from_args(parser.parse_args(argv), parser)) as url:
        assert _decided(url)["routable"] is True
        path = write_adapter(local, "trl-policy-v1")
        body = json.dumps({"lora_name": "trl-policy-v1", "lora_path": str(path)}).encode()
        request = urllib.request.Request(f"{url}/v1/load_lora_adapter", data=body,
                                         headers={"Content-Type": "application/json"})  # fmt: skip
        with urllib.request.urlopen(request, timeout=20) as response:
            assert response.status == 200
        _landed(bucket / "trl-policy-v1")
    (proxy,) = launched
    assert proxy[proxy.index("--adapters-local") + 1] == str(local)
    assert proxy[proxy.index("--adapters-mirror") + 1] == str(bucket)
    if topology == "sidecar":  # it watches where TRL saves; the relay watches nothing
        assert proxy[proxy.index("--adapters-dir") + 1] == str(local)
    else:
        assert "--adapters-dir" not in proxy
    assert {p.name for p in (bucket / "trl-policy-v1").iterdir()} == {
        p.name for p in path.iterdir()
    }


def test_a_proxy_variable_the_proxy_does_not_know_is_named_and_left_out_not_fatal(
    tmp_path: Path,
    servers: BackgroundServers,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The trainer's environment may hold a variable of the user's that only looks like the
    proxy's (the proxy alone refuses it, exit 2): the sidecar names it with the closest setting
    and starts without it; the ones it knows still reach it."""
    replica = servers.start(build_sim_app(SimSettings()))
    monkeypatch.setenv("PROXY_MAX_INFLIGHT_PER_REPLCA", "3")
    monkeypatch.setenv("PROXY_MAX_INFLIGHT_PER_REPLICA", "7")

    with proxy_for(_options(tmp_path, replica)) as url:
        state = _decided(url)
        per_replica = _status(url)["max_inflight_per_replica"]

    assert state["routable"] is True, state
    assert per_replica == 7
    assert (
        "unknown environment variable PROXY_MAX_INFLIGHT_PER_REPLCA: did you mean "
        "PROXY_MAX_INFLIGHT_PER_REPLICA? (not passed to the sidecar proxy)"
    ) in caplog.text
