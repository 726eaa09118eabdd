"""One job of the plan run on this machine, as HF Jobs would run it.

The job's command (``JobSpec.command``, unchanged) runs in its network namespace, under its
job's name as host name (a machine of its own: torch's gloo finds its address by it), inside a
private mount namespace whose file system ``machine`` makes: this machine's, with the bucket
folder at the plan's mount path (read-only where the spec says so), the group's hosts file over
``/etc/hosts`` and a folder of its own over ``/tmp`` (a container's own ``/tmp``: the install
step writes its constraints file there; a base environment that lives under /tmp is carried into
it), nothing of it made outside the rehearsal's work folder. Its environment is the spec's
``env`` and secrets and what HF Jobs adds (``HF_NETWORK_GROUP_PREFIX``,
``HF_NETWORK_GROUP_HOSTNAME``), on the image's ``PATH``; nothing of this machine's environment
leaks in but its pip settings (where its registries are) and the rehearsal's own
(``extra_env``: offline Hub, the registry tunnel). Output goes to one log file.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from deploy.plan import NETWORK_PREFIX
from deploy.rehearsal.machine import Machine, script
from deploy.rehearsal.network import Group, Member
from deploy.specs import JobSpec
from proxy.lifeline import preexec

PASSED_THROUGH = ("PIP_", "UV_")  # this machine's registry settings
LOG_TAIL_LINES = 25
KILLED_WAIT_S = 5.0  # for a job's process to be reaped once SIGKILLed


@dataclass
class LocalJob:
    spec: JobSpec
    member: Member
    log_path: Path
    process: subprocess.Popen[bytes]
    started: Path  # there once its machine was made and its command began

    def command_ran(self) -> bool:
        """Whether its command began: a job that ended without is the rehearsal's own failure
        to make its machine (a mount, the namespace), not the job's."""
        return self.started.exists()

    def exit_code(self) -> int | None:
        return self.process.poll()

    def tail(self, lines: int = LOG_TAIL_LINES) -> list[str]:
        text = self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
        return text.splitlines()[-lines:]

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""


def start(
    spec: JobSpec,
    *,
    group: Group,
    image_bin: Path,
    bucket_dir: Path,
    workdir: Path,
    secrets: Mapping[str, str],
    extra_env: Mapping[str, str],
    keep: Sequence[Path] = (),
    again: Member | None = None,
    folder: str | None = None,
) -> LocalJob:
    """Join ``spec`` to the group and start its command; returns at once. ``again``: the member
    of an earlier attempt of this job, run again as HF Jobs retries a job: its address and
    aliases, a fresh ``/tmp`` and home (a new container, named by ``folder``), the same bucket.
    ``folder``: what its folders and log are named (default: its name)."""
    aliases = spec.network.aliases if spec.network else ()
    member = again or group.join(spec.name, aliases)
    name = folder or spec.name
    tmp = workdir / "tmp" / name
    home = workdir / "home" / name
    tmp.mkdir(parents=True)
    home.mkdir(parents=True)
    (mount,) = spec.volumes
    env = {
        **{k: v for k, v in os.environ.items() if k.startswith(PASSED_THROUGH)},
        "PATH": f"{image_bin}:/usr/local/bin:/usr/bin:/bin",
        "HOME": str(home),
        "LANG": "C.UTF-8",
        **spec.env,
        **{name: secrets[name] for name in spec.secret_names},
        NETWORK_PREFIX: group.prefix,
        "HF_NETWORK_GROUP_HOSTNAME": group.hostname,
        **extra_env,
    }
    machine = Machine(
        name=spec.name, root=workdir / "roots" / name, mount=mount, bucket_dir=bucket_dir,
        hosts_file=group.hosts_file, tmp=tmp, started=workdir / "started" / name,
        chroot=shutil.which("chroot") or "chroot", keep=tuple(keep),
    )  # fmt: skip
    machine.root.mkdir(parents=True)
    machine.started.parent.mkdir(exist_ok=True)
    for kept in keep:
        if kept.is_relative_to("/tmp"):  # carried into the job's own /tmp
            (tmp / kept.relative_to("/tmp")).mkdir(parents=True, exist_ok=True)
    setup = script(machine, machine.listings())
    argv = [
        *("ip", "netns", "exec", member.netns),
        *("unshare", "--mount", "--uts", "--propagation", "private"),
        *("sh", "-c", setup, "sh", *spec.command),
    ]
    log_path = workdir / "logs" / f"{name}.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            argv, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True,
            preexec_fn=preexec(signal.SIGKILL),  # a killed rehearsal leaves no job running
        )  # fmt: skip
    return LocalJob(spec, member, log_path, process, machine.started)


def stop(job: LocalJob, grace_s: float) -> None:
    """Stop ``job`` as HF Jobs stops a cancelled one: SIGTERM to its command's process group,
    SIGKILL once ``grace_s`` has passed without it ending; returns once it ended. What is gone
    already is fine."""
    if job.exit_code() is not None:
        return
    with contextlib.suppress(OSError):
        os.killpg(job.process.pid, signal.SIGTERM)
    try:
        job.process.wait(grace_s)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(OSError):
            os.killpg(job.process.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            job.process.wait(KILLED_WAIT_S)
