"""CPU hogs: busy-loop processes that keep the machine's cores busy while a suite measures what
the proxy does on a loaded machine (a trainer's host, a shared CI runner). Each is a child of
this process, stopped by its PID on exit."""

from __future__ import annotations

import contextlib
import subprocess
import sys
from collections.abc import Iterator

BUSY_LOOP = "while True: pass"


@contextlib.contextmanager
def hogs(count: int) -> Iterator[list[int]]:
    """``count`` busy loops running for the duration of the block; their PIDs."""
    started: list[subprocess.Popen[bytes]] = []
    try:
        for _ in range(count):
            started.append(subprocess.Popen([sys.executable, "-c", BUSY_LOOP]))
        yield [p.pid for p in started]
    finally:
        for process in started:
            process.kill()
            process.wait()
