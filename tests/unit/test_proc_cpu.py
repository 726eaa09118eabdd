"""A process's CPU time read from ``/proc/PID/stat`` (``benchmarks.harness.cpu``): utime and
stime counted after the last parenthesis, whatever the command name holds."""

from __future__ import annotations

import os

import pytest

from benchmarks.harness.cpu import TICKS_PER_S, cpu_seconds, cpu_ticks

# pid (comm) state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime stime ...
LINE = b"4242 (python) S 1 4242 4242 0 -1 4194560 9000 0 12 0 731 129 0 0 20 0 3 0 100 0 0\n"


def test_utime_and_stime_are_fields_14_and_15() -> None:
    assert cpu_ticks(LINE) == 731 + 129


def test_a_command_name_with_spaces_and_parentheses_does_not_shift_the_fields() -> None:
    odd = LINE.replace(b"(python)", b"(a) b (c) 1 2 3)")
    assert cpu_ticks(odd) == 860


@pytest.mark.parametrize("text", [b"", b"4242 python S 1 2 3", b"4242 (python) S 1 2 3"])
def test_what_is_not_a_stat_line_is_refused(text: bytes) -> None:
    with pytest.raises(ValueError, match="not a /proc/PID/stat line"):
        cpu_ticks(text)


def test_this_processs_own_cpu_agrees_with_os_times() -> None:
    sum(i * i for i in range(200_000))  # some CPU to read
    times = os.times()
    read = cpu_seconds(os.getpid())
    assert read == pytest.approx(times.user + times.system, abs=3 / TICKS_PER_S)
