"""The jobs the rehearsal's bridge answers for: the plan's own (started by the rehearsal, listed so
that a job finds and adopts its siblings) and those a job started through the Jobs API.

A job's stage is what the rehearsal sees of it, never a count of calls (``BridgeJob.stage``):
SCHEDULING until its command began (its environment and machine are being made), RUNNING while
it runs, COMPLETED or ERROR by its exit code, CANCELED from the moment a cancel was answered (its
processes are stopped next, as the rehearsal stops a job), ERROR with one line when the rehearsal
could not start it at all.

A job's log is its log file read as lines (``LogLines``), each stamped with the time the bridge
first read it; at most ``MAX_LOG_LINES`` are kept (then one line names the file), so a stream's
place in them never moves. ``Book`` is shared by the rehearsal's thread (the plan's jobs) and the
bridge's (its own jobs, every answer): one lock guards its table.
"""

from __future__ import annotations

import datetime
import itertools
import secrets
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from deploy.jobs import TERMINAL_STAGES
from deploy.rehearsal.bridge_specs import wire_spec
from deploy.rehearsal.jobs import LocalJob
from deploy.specs import JobSpec

MAX_LOG_LINES = 20_000  # kept per job
MAX_READ_BYTES = 1 << 20  # read from a log file per look
Origin = Literal["plan", "api"]


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


@dataclass
class LogLines:
    """The complete lines of a log file so far, each with when it was first read."""

    path: Path
    lines: list[tuple[datetime.datetime, str]] = field(default_factory=list)
    offset: int = 0
    partial: bytes = b""

    def read(self) -> list[tuple[datetime.datetime, str]]:
        if len(self.lines) >= MAX_LOG_LINES:
            return self.lines
        try:
            with self.path.open("rb") as log:
                log.seek(self.offset)
                chunk = log.read(MAX_READ_BYTES)
        except FileNotFoundError:
            return self.lines
        self.offset += len(chunk)
        *complete, self.partial = (self.partial + chunk).split(b"\n")
        now = _now()
        for raw in complete[: MAX_LOG_LINES - len(self.lines)]:
            self.lines.append((now, raw.decode(errors="replace").rstrip("\r")))
        if len(self.lines) >= MAX_LOG_LINES:
            self.lines[-1] = (now, f"(the bridge keeps {MAX_LOG_LINES} lines; all: {self.path})")
        return self.lines


@dataclass
class BridgeJob:
    """One job as the bridge knows it; ``spec`` is its wire form, secrets by name only."""

    id: str
    spec: dict[str, Any]
    origin: Origin
    created_at: datetime.datetime = field(default_factory=_now)
    local: LocalJob | None = None  # None while the rehearsal makes its environment
    failure: str | None = None  # why the rehearsal could not start it
    cancelled: bool = False
    stopping: bool = False  # its stop (after a cancel, or its end) is under way or done
    log: LogLines | None = None

    @property
    def name(self) -> str:
        return str((self.spec.get("labels") or {}).get("name", self.id))

    @property
    def labels(self) -> dict[str, str]:
        return dict(self.spec.get("labels") or {})

    def stage(self) -> tuple[str, str | None]:
        """The stage and its message, as the module docstring says."""
        if self.cancelled:
            return "CANCELED", None
        if self.failure is not None:
            return "ERROR", self.failure
        if self.local is None:
            return "SCHEDULING", None
        code = self.local.exit_code()
        if code is None:
            return ("RUNNING" if self.local.command_ran() else "SCHEDULING"), None
        if not self.local.command_ran():
            return "ERROR", "the rehearsal could not make its machine (see its log)"
        return ("COMPLETED", None) if code == 0 else ("ERROR", f"exited with code {code}")

    @property
    def ended(self) -> bool:
        return self.stage()[0] in TERMINAL_STAGES

    def attach(self, local: LocalJob) -> None:
        self.local = local
        self.log = LogLines(local.log_path)

    def log_lines(self) -> list[tuple[datetime.datetime, str]]:
        return self.log.read() if self.log is not None else []


class Book:
    """Every job of the rehearsal the bridge answers for, in the order they were made."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._jobs: dict[str, BridgeJob] = {}
        self._serial = itertools.count(1)

    def _new_id(self) -> str:
        """24 hex digits, as the Hub's ids; the serial first so ids sort by creation."""
        return f"{next(self._serial):08x}{secrets.token_hex(8)}"

    def record(self, spec: JobSpec, local: LocalJob) -> BridgeJob:
        """A job the rehearsal started from the plan; a job of that name again (a retry, as
        HF Jobs runs a job again) is the same job, its new run attached."""
        with self._lock:
            for job in self._jobs.values():
                if job.origin == "plan" and job.name == spec.name:
                    job.attach(local)
                    return job
            job = BridgeJob(self._new_id(), wire_spec(spec), "plan")
            job.attach(local)
            self._jobs[job.id] = job
            return job

    def add(self, spec: Mapping[str, Any]) -> BridgeJob:
        """A job asked for through the Jobs API (``spec`` without secret values)."""
        with self._lock:
            job = BridgeJob(self._new_id(), dict(spec), "api")
            self._jobs[job.id] = job
            return job

    def get(self, job_id: str) -> BridgeJob | None:
        with self._lock:
            return self._jobs.get(job_id)

    def all(self) -> list[BridgeJob]:
        with self._lock:
            return list(self._jobs.values())

    def cancelled(self, local: LocalJob) -> bool:
        """Whether the job running as ``local`` was cancelled through the Jobs API."""
        return any(job.local is local and job.cancelled for job in self.all())

    def asked(self) -> int:
        """Jobs asked for through the Jobs API so far."""
        return sum(job.origin == "api" for job in self.all())
