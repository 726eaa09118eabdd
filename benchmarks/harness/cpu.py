"""A process's own CPU time, read from ``/proc/PID/stat`` (proc(5)).

User plus system time of every thread of the process, in clock ticks (``SC_CLK_TCK``, 100 per
second on Linux): a delta over a run is the server's own CPU, whatever else the machine runs, and
never its load generator's. One tick is 10 ms, so a delta of T seconds is known to ±0.01 / T.
"""

from __future__ import annotations

import os

TICKS_PER_S = os.sysconf("SC_CLK_TCK")
_UTIME = 11  # utime and stime are fields 14 and 15; counted here from field 3 (the state)
_STIME = 12


def cpu_ticks(stat: bytes) -> int:
    """utime + stime from the text of ``/proc/PID/stat``. The command name (field 2) is in
    parentheses and may itself hold spaces and parentheses, so the fields are counted after
    the last ``)``. ValueError when the text is not such a line."""
    head, paren, tail = stat.rpartition(b")")
    fields = tail.split()
    if not paren or b"(" not in head or len(fields) <= _STIME:
        raise ValueError(f"not a /proc/PID/stat line: {stat[:80]!r}")
    return int(fields[_UTIME]) + int(fields[_STIME])


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of process ``pid`` so far, in seconds."""
    with open(f"/proc/{pid}/stat", "rb") as handle:
        return cpu_ticks(handle.read()) / TICKS_PER_S
