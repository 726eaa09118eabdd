"""A trainer's run on a shared fleet (``trainer_entry.fleet_run``) against a real proxy: declared
with the fleet's admin key before training, again (idempotent) when the job runs again, removed
after; a wrong key, a URL that names no run and an unreachable proxy each end in one line."""

from __future__ import annotations

import asyncio

import pytest

from proxy.app import PROXY
from tests.support.fleet import run_stack
from trainer_entry import fleet_run
from trainer_entry.flags import build_parser
from trainer_entry.fleet_run import FleetRefused, FleetRun
from trainer_entry.freeze import options_from_args
from trainer_entry.sidecar import free_port

KEY = "fleet-key-0123456789"


async def test_a_run_is_declared_while_it_trains_and_removed_after() -> None:
    async with run_stack(1, admin_key=KEY) as stack:
        runs = stack.proxy_app[PROXY].runs
        url = f"{stack.proxy_url}/runs/sweep-lr3"

        def train() -> tuple[bool, float]:
            with fleet_run.declared(url, KEY, 2.0):
                fleet_run.declare(FleetRun.of(url), KEY, 2.0)  # a job run again: 200, no error
                return "sweep-lr3" in runs, runs.get("sweep-lr3").weight

        assert await asyncio.to_thread(train) == (True, 2.0)
        assert "sweep-lr3" not in runs
        async with stack.session.get(url + "/v1/models") as response:
            assert response.status == 404  # gone from the fleet: its paths answer 404


async def test_a_key_that_is_not_the_fleets_is_refused_in_one_line() -> None:
    async with run_stack(1, admin_key=KEY) as stack:
        run = FleetRun.of(f"{stack.proxy_url}/runs/a")
        with pytest.raises(FleetRefused, match="refused the fleet key: it is derived from"):
            await asyncio.to_thread(fleet_run.declare, run, "not-the-key", 1.0)
        assert "a" not in stack.proxy_app[PROXY].runs


async def test_a_proxy_that_never_answers_ends_the_wait_in_one_line() -> None:
    run = FleetRun.of(f"http://127.0.0.1:{free_port()}/runs/a")
    with pytest.raises(FleetRefused, match=r"was not reachable for 0\.3 s"):
        await asyncio.to_thread(fleet_run.declare, run, KEY, 1.0, wait_s=0.3, retry_s=0.1)


@pytest.mark.parametrize(
    "url", ["http://proxy:8000", "http://proxy:8000/runs/", "http://proxy:8000/runs/a/v1"]
)
def test_a_url_that_names_no_run_is_refused(url: str) -> None:
    with pytest.raises(ValueError, match="does not end in /runs/<run>"):
        FleetRun.of(url)


def test_the_run_and_the_proxy_are_read_off_the_url() -> None:
    assert FleetRun.of("http://proxy:8000/runs/lr-3/") == FleetRun("http://proxy:8000", "lr-3")


BASE = ("--model", "m", "--dataset", "d.jsonl", "--output-dir", "/tmp/never-made")


@pytest.mark.parametrize(
    ("extra", "environ", "said"),
    [
        (("--sidecar-replicas", "http://r:8000", "--fleet-key-env", "K"), {"K": "x"},
         "argument --fleet-key-env: only with --proxy-url"),
        (("--proxy-url", "http://proxy:8000", "--fleet-key-env", "K"), {"K": "x"},
         "argument --proxy-url: 'http://proxy:8000' does not end in /runs/<run>"),
        (("--proxy-url", "http://proxy:8000/runs/a", "--fleet-key-env", "K"), {},
         "argument --fleet-key-env: $K is not set"),
        (("--proxy-url", "http://proxy:8000/runs/a", "--fleet-key-env", "K", "--run-weight",
          "0"), {"K": "x"}, "argument --run-weight: above 0, at most 1000 (got 0)"),
    ],
)  # fmt: skip
def test_the_fleet_flags_are_checked_before_anything_starts(
    extra: tuple[str, ...], environ: dict[str, str], said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    parser = build_parser()
    with pytest.raises(SystemExit) as info:
        options_from_args(parser.parse_args([*BASE, *extra]), parser, environ, here=False)
    assert info.value.code == 2
    assert said in capsys.readouterr().err


def test_the_fleet_flags_reach_the_topology() -> None:
    parser = build_parser()
    argv = [*BASE, "--proxy-url", "http://proxy:8000/runs/a", "--fleet-key-env", "K",
            "--run-weight", "2"]  # fmt: skip
    topology = options_from_args(parser.parse_args(argv), parser, {"K": "x"}, here=False).topology
    assert (topology.fleet_key_env, topology.run_weight) == ("K", 2.0)
