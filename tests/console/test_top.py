"""``rollout-proxy top`` against a live proxy with simulated replicas: the ``--once`` snapshot,
its token handling, and the live view in a real terminal (tmux: start, read the screen, quit)."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from proxy.app import PROXY
from tests.support.adapters import write_version
from tests.support.calls import completion, load_body, post
from tests.support.fleet import Stack, run_stack
from tests.support.waiting import eventually

QUICK_S = 30.0


async def top(*args: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    process = await asyncio.create_subprocess_exec(
        *(sys.executable, "-m", "proxy", "top", *args),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, **(env or {})},
    )
    out, err = await asyncio.wait_for(process.communicate(), QUICK_S)
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


async def tmux(*args: str, check: bool = True) -> str:
    process = await asyncio.create_subprocess_exec(
        "tmux", *args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    out, _ = await asyncio.wait_for(process.communicate(), QUICK_S)
    assert not check or process.returncode == 0, out.decode()
    return out.decode()


async def some_traffic(stack: Stack) -> None:
    for _ in range(3):
        for prompt in ([1] * 40, [2] * 40):
            assert (await post(stack, "/v1/completions", completion(prompt=prompt)))[0] == 200


async def test_once_prints_every_replica_in_full_whatever_the_terminal_width() -> None:
    async with run_stack(2) as stack:
        await some_traffic(stack)
        code, out, err = await top(stack.proxy_url, "--once", env={"COLUMNS": "20"})
        assert code == 0, err
        for sim in stack.sims:
            assert any(line.startswith(sim.id + " ") for line in out.splitlines()), out
        assert "healthy" in out and "policy prefix" in out
        assert "cache hit ratio" in out and "latency p50" in out
        assert "\x1b[" not in out  # plain text: no colours or cursor moves


async def test_once_sends_the_proxys_key_from_the_environment() -> None:
    async with run_stack(1, api_key="the-key") as stack:
        code, _, err = await top(stack.proxy_url, "--once", env={"PROXY_API_KEY": ""})
        assert code == 1 and "401" in err and "PROXY_API_KEY" in err
        code, out, err = await top(stack.proxy_url, "--once", env={"PROXY_API_KEY": "the-key"})
        assert code == 0, err
        assert stack.sims[0].id in out
        code, out, err = await top(
            stack.proxy_url, "--once", "--token-env", "MY_KEY", env={"MY_KEY": "the-key"}
        )
        assert code == 0, err
        assert "the-key" not in out + err


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed here")
async def test_the_live_view_draws_in_a_terminal_and_quits_on_q() -> None:
    session = f"top-{os.getpid()}"
    async with run_stack(2) as stack:
        await some_traffic(stack)
        view = f"{sys.executable} -m proxy top {stack.proxy_url} --interval 0.5"
        command = f"cd {os.getcwd()} && {view}; echo EXIT=$?; sleep {QUICK_S}"
        await tmux("new-session", "-d", "-s", session, "-x", "160", "-y", "40", command)
        screens = [""]

        async def showing(*texts: str) -> bool:
            screens.append(await tmux("capture-pane", "-p", "-t", session))
            return all(text in screens[-1] for text in texts)

        try:
            # Every 200 ms: each look at the screen is a tmux process.
            sims = [sim.id for sim in stack.sims]
            await eventually(lambda: showing(*sims), QUICK_S, "every replica", interval=0.2)
            screen = screens[-1]
            assert "rollout-proxy top" in screen and "healthy" in screen
            await tmux("send-keys", "-t", session, "q")
            await eventually(lambda: showing("EXIT="), QUICK_S, "top to quit", interval=0.2)
            assert "EXIT=0" in screens[-1]
        except AssertionError as exc:
            raise AssertionError(f"the screen:\n{screens[-1]}") from exc
        finally:
            await tmux("kill-session", "-t", session, check=False)


async def test_once_shows_each_replicas_digests_and_a_replica_withheld_from_a_version(
    tmp_path: Path,
) -> None:
    async with run_stack(sims=[{}, {"faults": {"policy": "base"}}]) as stack:
        honest, faulty = (sim.id for sim in stack.sims)
        path = write_version(tmp_path, 1, reference=True)
        status, body, _ = await post(stack, "/v1/load_lora_adapter", load_body(path.name, path))
        assert status == 200, body
        await stack.proxy_app[PROXY].adapters.service.settled()
        code, out, err = await top(stack.proxy_url, "--once")
        assert code == 0, err
        rows = {line.split()[0]: line for line in out.splitlines() if line.startswith("127.")}
        digest = stack.pool.get(honest).digests["trl-policy-v1"][:6]  # type: ignore[union-attr]
        assert f"v1@{digest}" in rows[honest] and rows[honest].endswith(" ok")
        assert rows[faulty].endswith(" v1 withheld") and "v1@" not in rows[faulty]
        assert "served policy  probe on  withheld 1" in out
        assert "ALARM" not in out  # the honest replica serves it


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed here")
async def test_the_live_view_fits_80x24_with_the_replica_table_on_screen(tmp_path: Path) -> None:
    """The advisor's figures, a warning, two runs: in 80x24 every replica's row is still on
    screen (the head is compact, its lines cut, not wrapped; the rest goes below the table)."""
    session = f"top-small-{os.getpid()}"
    missing = tmp_path / "not-mounted-yet"
    stack_ = run_stack(3, advice_window=2.0, adapters_dir=str(missing), runs="a,b")
    async with stack_ as stack:
        await some_traffic(stack)
        view = f"{sys.executable} -m proxy top {stack.proxy_url} --interval 0.3"
        command = f"cd {os.getcwd()} && {view}; sleep {QUICK_S}"
        await tmux("new-session", "-d", "-s", session, "-x", "80", "-y", "24", command)
        screens = [""]

        async def warmed_up() -> bool:
            screens.append(await tmux("capture-pane", "-p", "-t", session))
            screen = screens[-1]
            return "advice: " in screen and "warming-up" not in screen

        try:
            await eventually(warmed_up, QUICK_S, "the advisor's verdict", interval=0.2)
            lines = screens[-1].rstrip().splitlines()
            for sim in stack.sims:
                rows = [line for line in lines if line.startswith(sim.id + " ")]
                assert len(rows) == 1 and "healthy" in rows[0], sim.id
            assert len(lines) <= 24
            assert lines[-1].strip() == "..."  # more than fits: the rest is cut at the bottom
            assert lines[0].startswith("rollout-proxy top (q quits)")
            assert lines[1].startswith("in flight ")  # the title line was cut, not wrapped
            assert any(line.startswith("warning: adapter directory") for line in lines)
        except AssertionError as exc:
            raise AssertionError(f"the screen:\n{screens[-1]}") from exc
        finally:
            await tmux("kill-session", "-t", session, check=False)
