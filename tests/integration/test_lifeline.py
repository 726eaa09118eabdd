"""Processes that end with their parent (``proxy.lifeline``, ``trainer_entry.lifeline``): real
processes, SIGKILLed as an OOM kill would, every wait bounded."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from trainer_entry.lifeline import LAUNCHER_PID_ENV, alive

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux prctl")

# The launcher stand-in: it starts a child tied to it, prints the child's pid, and waits to be
# killed. "preexec": the child dies by the kernel's parent-death signal. "watch": between them
# stands an untied middle process in a new session (as torch's launcher is between the trainer
# and its ranks), which outlives the launcher; only the child's watch on the launcher's pid can
# end it. The launcher prints the middle's pid first, for the clean-up.
PARENT = textwrap.dedent(
    """
    import os, subprocess, sys, time
    from proxy.lifeline import preexec
    sleeper = [sys.executable, "-c", "import time; time.sleep(120)"]
    if sys.argv[1] == "preexec":
        print(0, flush=True)
        print(subprocess.Popen(sleeper, preexec_fn=preexec()).pid, flush=True)
    else:
        child = (
            "import os, time\\n"
            "from trainer_entry.lifeline import watch_launcher\\n"
            "watch_launcher()\\n"
            "print(os.getpid(), flush=True)\\n"
            "time.sleep(120)\\n"
        )
        middle = (
            "import subprocess, sys, time; "
            "subprocess.Popen([sys.executable, '-c', sys.argv[1]]); time.sleep(120)"
        )
        env = {**os.environ, "LAUNCHER_PID_ENV": str(os.getpid())}
        started = subprocess.Popen(
            [sys.executable, "-c", middle, child], env=env, start_new_session=True
        )
        print(started.pid, flush=True)
    time.sleep(120)
    """
).replace("LAUNCHER_PID_ENV", LAUNCHER_PID_ENV)


def _start(mode: str, tmp_path: Path) -> tuple[subprocess.Popen[str], int, int]:
    script = tmp_path / "parent.py"
    script.write_text(PARENT)
    parent = subprocess.Popen(
        [sys.executable, str(script), mode],
        stdout=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).resolve().parents[2],
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])},
    )
    assert parent.stdout is not None
    middle, child = parent.stdout.readline(), parent.stdout.readline()
    assert middle.strip().isdigit() and child.strip().isdigit(), (middle, child)
    return parent, int(middle), int(child)


def _gone_within(pid: int, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


@pytest.mark.parametrize("mode", ["preexec", "watch"])
def test_a_child_ends_when_its_parent_is_sigkilled(mode: str, tmp_path: Path) -> None:
    parent, middle, child = _start(mode, tmp_path)
    try:
        assert alive(child)
        parent.send_signal(signal.SIGKILL)
        parent.wait(10)
        assert _gone_within(child, 10), f"{mode}: child {child} outlived its parent"
        if middle:
            assert alive(middle)  # the untied middle lives on: the watch, not the kernel, did it
    finally:
        if middle and alive(middle):
            os.kill(middle, signal.SIGKILL)
        if alive(child):
            os.kill(child, signal.SIGKILL)
        if parent.poll() is None:
            parent.kill()
            parent.wait(10)
        assert parent.stdout is not None
        parent.stdout.close()


def test_a_zombie_launcher_counts_as_dead(tmp_path: Path) -> None:
    done = subprocess.Popen([sys.executable, "-c", "pass"])
    deadline = time.monotonic() + 10
    while Path(f"/proc/{done.pid}/stat").read_bytes().rsplit(b")", 1)[1].split()[0] != b"Z":
        assert time.monotonic() < deadline
        time.sleep(0.02)
    assert not alive(done.pid)  # exited, not reaped yet
    done.wait(10)
    assert alive(os.getpid())
