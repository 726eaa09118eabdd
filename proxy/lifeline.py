"""Child processes that end with their parent, however the parent ends.

A process killed with SIGKILL (an out-of-memory kill, a job's end) runs no cleanup, so whatever
it started lives on: a proxy holding the port the restarted command needs, ranks that never
finish. Linux's ``prctl(PR_SET_PDEATHSIG, sig)`` asks the kernel to send ``sig`` to a process
when the thread that forked it exits; ``die_with_parent`` sets it and closes the race where the
parent ended before the call (the process then ends at once). Standard library only: the
trainer's launcher and the proxy's supervisor both use it, and neither may pull in more.

Elsewhere than Linux it does nothing and says so (returns False).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import signal
import sys
from collections.abc import Callable

_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def die_with_parent(signum: int = signal.SIGKILL, parent: int | None = None) -> bool:
    """Have the kernel send ``signum`` to this process when its parent thread exits.

    ``parent``: the pid the parent had before the fork (``os.getpid()`` read in the parent, as a
    ``preexec_fn`` does); if this process has been handed to another parent meanwhile, it exits
    at once. Safe between ``fork`` and ``exec`` (no allocation beyond ctypes' call). Returns
    whether the kernel took the request.
    """
    if not sys.platform.startswith("linux"):
        return False
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    if libc.prctl(_PR_SET_PDEATHSIG, int(signum), 0, 0, 0) != 0:
        return False
    if parent is not None and os.getppid() != parent:
        os._exit(128 + int(signum))  # the parent is gone already: nothing would deliver the signal
    return True


def preexec(signum: int = signal.SIGKILL) -> Callable[[], None]:
    """A ``subprocess.Popen(preexec_fn=...)`` that makes the child die with the caller."""
    parent = os.getpid()

    def bind() -> None:
        die_with_parent(signum, parent)

    return bind
