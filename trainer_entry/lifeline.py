"""Ranks, and what they spawn, end within a second of the trainer command, however it ends.

The trainer command (the launcher) puts its pid in ``LAUNCHER_PID_ENV``. ``watch_launcher``, called
when ``trainer_entry.rank`` is imported, (1) asks the kernel to SIGKILL this process when its
parent dies (``proxy.lifeline.die_with_parent``: for a rank, torch's launcher) and (2) starts a
daemon thread that ends this process once the launcher's pid is gone (checked every
``POLL_S``). (2) covers what (1) cannot: torch's launcher starts ranks in new sessions and is
itself only the launcher's child, and a parent-death signal fires when the *thread* that forked
exits. TRL's rollout worker is a ``spawn`` child of rank 0, and ``spawn`` imports the parent's
main module (``trainer_entry.rank``) in the child first, so the child watches too.
Outside a launched trainer (no ``LAUNCHER_PID_ENV``) it does nothing.
"""

from __future__ import annotations

import os
import threading
import time

from proxy.lifeline import die_with_parent

LAUNCHER_PID_ENV = "ROLLOUT_TRAINER_LAUNCHER_PID"
POLL_S = 0.5
EXIT_ORPHANED = 137  # as if SIGKILLed, which is what would have happened with the launcher


def alive(pid: int) -> bool:
    """Whether ``pid`` runs: it exists and, where ``/proc`` tells, is not a zombie (a killed
    launcher its own parent has not reaped yet is dead for us)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # it exists, under another user
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            return stat.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except (OSError, IndexError):
        return True


def watch_launcher() -> bool:
    """Tie this process to the launcher named in the environment; returns whether it did."""
    value = os.environ.get(LAUNCHER_PID_ENV, "")
    if not value.isdigit():
        return False
    launcher = int(value)
    die_with_parent()
    if not alive(launcher):
        os._exit(EXIT_ORPHANED)

    def watch() -> None:
        while alive(launcher):
            time.sleep(POLL_S)
        os._exit(EXIT_ORPHANED)

    threading.Thread(target=watch, name="launcher-watch", daemon=True).start()
    return True
