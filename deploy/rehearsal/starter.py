"""The rehearsal's job starter: one job from its spec, as the rehearsal runs each of them, for the
plan's jobs (``Rehearsal.launch``) and for those a job asks for through the bridge (it is the
bridge's ``Runner``).

A job gets an environment made like its image (``images``), a namespace in the group under its
aliases and the bucket folder at its mount path (``jobs``), its spec's variables and secrets, and
the rehearsal's own (``variables``): the registry tunnel (``HTTPS_PROXY``), the bridge as the Hub
(``HF_ENDPOINT``, every job), and ``HF_HUB_OFFLINE=1`` for every job but the trainer's
(``ONLINE_ROLES``: where a scaler calls the Jobs API; the model and dataset are local there, and
whatever else it might ask the Hub for reaches the bridge, which refuses it and says so); a
replica, the CPU build's vLLM variables.

A job asked for through the bridge whose command is one the rehearsal substitutes in the plan's
jobs (``substitutes``: the planned replica command, as ``deploy up`` writes it or with the
rehearsal's model) runs the substituted command, said. Only the plan's bucket can be mounted
(``refusal``). ``stop`` stops a job as the rehearsal does (SIGTERM, SIGKILL after ``grace_s``,
then whatever is left in its namespace) and takes it out of the group's DNS. The group's
members and hosts file change under one lock: the rehearsal's thread and the bridge's workers
start and stop jobs at once.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from deploy.errors import DeployError
from deploy.rehearsal import images, jobs
from deploy.rehearsal.network import Group, Member
from deploy.rehearsal.stand_ins import CPU_REPLICA_ENV, Command
from deploy.specs import JobSpec

ONLINE_ROLES = frozenset({"trainer"})
STOP_GRACE_S = 15.0


@dataclass
class Starter:
    base_python: Path
    workdir: Path
    group: Group
    bucket: str  # the plan's NS/BUCKET, which bucket_dir stands for
    bucket_dir: Path
    registry: str  # the tunnel's URL
    hub: str  # the bridge's URL
    say: Callable[[str], None]
    substitutes: Mapping[Command, tuple[Command, str]] = field(default_factory=dict)
    grace_s: float = STOP_GRACE_S
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _folders: set[str] = field(default_factory=set)
    _base_site: Path | None = None

    def variables(self, spec: JobSpec) -> dict[str, str]:
        """What the rehearsal adds to ``spec``'s environment (the module docstring)."""
        out = {"HTTPS_PROXY": self.registry, "https_proxy": self.registry, "HF_ENDPOINT": self.hub}
        if spec.role not in ONLINE_ROLES:
            out["HF_HUB_OFFLINE"] = "1"
        if spec.role == "replica":
            out.update(CPU_REPLICA_ENV)
        return out

    @property
    def base_site(self) -> Path:
        """The base environment's site-packages (image layers link into it)."""
        if self._base_site is None:
            self._base_site = images.base_site_packages(self.base_python)
        return self._base_site

    def start(self, spec: JobSpec, secrets: Mapping[str, str]) -> jobs.LocalJob:
        """A job asked for through the bridge (its ``Runner``): substituted as the plan's jobs
        are (the module docstring), then started as they are, every line said as the bridge's."""
        if spec.command in self.substitutes:
            command, what = self.substitutes[spec.command]
            self.say(f"bridge: {spec.name}'s command is the plan's: it runs {what}")
            spec = replace(spec, command=command)
        return self.launch(spec, secrets, origin="bridge: ")

    def launch(
        self,
        spec: JobSpec,
        secrets: Mapping[str, str],
        again: Member | None = None,
        origin: str = "",
    ) -> jobs.LocalJob:
        """Start ``spec`` (the plan's, as planned, or the bridge's); ``secrets`` holds a value
        for each of its secret names; ``again``: run a job of the plan again (``jobs.start``);
        ``origin``: said before ``started``."""
        with self._lock:
            folder = spec.name if again is None else f"{spec.name}.attempt2"
            serial = 2
            while folder in self._folders:  # a name asked for again through the bridge
                folder, serial = f"{spec.name}.{serial}", serial + 1
            self._folders.add(folder)
        image_bin = images.make_environment(spec.image, self.base_python,
                                            self.workdir / "envs" / folder)  # fmt: skip
        with self._lock:  # the group's members and hosts file
            job = jobs.start(spec, group=self.group, image_bin=image_bin,
                             bucket_dir=self.bucket_dir, workdir=self.workdir, secrets=secrets,
                             extra_env=self.variables(spec), keep=[self.base_site], again=again,
                             folder=folder)  # fmt: skip
        aliases = ", ".join(job.member.aliases) or "none"
        self.say(f"{origin}started {spec.name} ({spec.image}) at {job.member.address}, "
                 f"aliases {aliases}: log {job.log_path}")  # fmt: skip
        return job

    def refusal(self, spec: JobSpec) -> str | None:
        """Why this rehearsal cannot run ``spec``: an image it has no stand-in for, a bucket
        other than the plan's, a mount path that is not absolute."""
        try:
            images.stand_in(spec.image, self.base_site.parent.name.removeprefix("python"))
        except DeployError as exc:
            return str(exc)
        (mount,) = spec.volumes
        if mount.source != self.bucket:
            return (
                f"the rehearsal has one bucket, {self.bucket} (a local folder): mount it, "
                f"not {mount.source}"
            )
        if not mount.mount_path.startswith("/"):
            return f"the mount path must be absolute (got {mount.mount_path})"
        return None

    def stop(self, job: jobs.LocalJob) -> None:
        jobs.stop(job, self.grace_s)
        self.group.kill(job.member)
        with self._lock:
            self.group.leave(job.member)
