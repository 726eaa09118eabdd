"""The run's jobs through the real ``huggingface_hub`` client, seen as small ``JobView`` values.

Every call passes ``namespace`` explicitly: without it the client asks ``whoami`` first, and
``list_jobs`` (huggingface_hub 2.4) asks the module-level ``whoami``, which ignores the
``HfApi(endpoint=...)`` this wrapper was given.
"""

from __future__ import annotations

import importlib
import socket
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

from huggingface_hub import HfApi, JobInfo
from huggingface_hub.errors import HfHubHTTPError

from deploy.specs import INDEX_LABEL, ROLE_LABEL, ROLES, RUN_LABEL, SCALED_LABEL, JobSpec

TERMINAL_STAGES = frozenset({"COMPLETED", "CANCELED", "ERROR", "DELETED"})


def _transport_errors(base: str = "RequestError") -> tuple[type[Exception], ...]:
    """The client's ``base`` error classes: ``httpx2`` in huggingface_hub 2.x, ``httpx`` in
    1.x; both when both are installed (which one the client uses depends on its version)."""
    errors = []
    for name in ("httpx2", "httpx"):
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        errors.append(getattr(module, base))
    return tuple(errors)


# What a Hub call can raise that is the Hub's or the network's doing, not a bug of ours.
HUB_ERRORS: tuple[type[Exception], ...] = (HfHubHTTPError, OSError, *_transport_errors())
# Of those, a call that got no answer at all: DNS, a refused connection, a timeout, a proxy.
NETWORK_ERRORS: tuple[type[Exception], ...] = (
    ConnectionError,
    TimeoutError,
    socket.gaierror,
    *_transport_errors("TransportError"),
)


@dataclass(frozen=True)
class JobView:
    """What the deploy commands need to know about one job."""

    id: str
    name: str
    role: str
    index: int
    stage: str
    message: str | None
    expose_urls: tuple[str, ...]
    flavor: str
    retries: int | None = None  # the runs HF Jobs may add after a failure (``JobInfo.retry``)
    network: str | None = None  # the network group it joined, and its aliases there
    scaled: bool = False  # launched by the run's scaler (``SCALED_LABEL``), not by deploy up
    # Seconds since the epoch: created, started running, ended (None: not yet, or the client
    # too old to say; ``started_at``/``finished_at`` are huggingface_hub 2.2+).
    created_at: float | None = None
    started_at: float | None = None
    finished_at: float | None = None

    @classmethod
    def of(cls, info: JobInfo) -> JobView:
        labels = info.labels or {}
        stage = info.status.stage
        flavor = info.flavor
        return cls(
            id=info.id,
            name=labels.get("name", info.id),
            role=labels.get(ROLE_LABEL, "?"),
            index=int(labels.get(INDEX_LABEL, "0")),
            stage=stage.value if isinstance(stage, Enum) else str(stage),
            message=info.status.message,
            expose_urls=tuple(info.status.expose_urls or ()),
            flavor="" if flavor is None else (flavor.value if isinstance(flavor, Enum) else flavor),
            retries=info.retry,
            network=_network(info),
            scaled=SCALED_LABEL in labels,
            created_at=_epoch(info, "created_at"),
            started_at=_epoch(info, "started_at"),
            finished_at=_epoch(info, "finished_at"),
        )

    @property
    def terminal(self) -> bool:
        return self.stage in TERMINAL_STAGES

    def url(self, port: int) -> str | None:
        """The exposed URL of ``port`` as the Jobs API lists it (scheme and host included)."""
        for url in self.expose_urls:
            if url.rstrip("/").endswith(f"--{port}.hf.jobs"):
                return url.rstrip("/")
        return self.expose_urls[0].rstrip("/") if self.expose_urls else None


def _epoch(info: JobInfo, name: str) -> float | None:
    moment = getattr(info, name, None)
    return None if moment is None else float(moment.timestamp())


def _network(info: JobInfo) -> str | None:
    """``group`` or ``group as alias, ...`` (``JobInfo.network``: huggingface_hub 1.32+)."""
    network = getattr(info, "network", None)
    if network is None:
        return None
    aliases = ", ".join(network.aliases)
    return f"{network.group} as {aliases}" if aliases else str(network.group)


def _order(view: JobView) -> tuple[int, int]:
    return (ROLES.index(view.role) if view.role in ROLES else len(ROLES), view.index)


class HubJobs:
    """Jobs and bucket calls of one namespace through ``HfApi``."""

    def __init__(self, api: HfApi, namespace: str) -> None:
        self.api = api
        self.namespace = namespace

    def ensure_bucket(self, bucket: str) -> bool:
        """Create ``bucket`` (private) unless it exists; whether it is private. An existing
        bucket keeps its visibility whatever ``create_bucket`` asks (the client's own
        ``sync_job_volume`` checks ``bucket_info`` the same way)."""
        self.api.create_bucket(bucket, private=True, exist_ok=True)
        return bool(self.api.bucket_info(bucket).private)

    def upload(self, bucket: str, local: Path, destination: str) -> None:
        self.api.batch_bucket_files(bucket, add=[(str(local), destination)])

    def launch(self, spec: JobSpec, secrets: Mapping[str, str]) -> JobView:
        return JobView.of(self.api.run_job(**spec.run_job_kwargs(secrets, self.namespace)))

    def inspect(self, job_id: str) -> JobView:
        return JobView.of(self.api.inspect_job(job_id=job_id, namespace=self.namespace))

    def cancel(self, job_id: str) -> None:
        self.api.cancel_job(job_id=job_id, namespace=self.namespace)

    def of_run(self, run_name: str) -> list[JobView]:
        """Every job labelled with ``run_name``, replicas first, then proxy, then trainer."""
        return self.labelled(RUN_LABEL, run_name)

    def labelled(self, label: str, value: str) -> list[JobView]:
        """Every job with ``label: value`` (e.g. a fleet's and its runs'), in ``of_run``'s
        order."""
        infos = self.api.list_jobs(labels={label: value}, namespace=self.namespace)
        return sorted((JobView.of(info) for info in infos), key=_order)

    def logs(self, job_id: str, *, follow: bool = False, tail: int | None = None) -> Iterable[str]:
        return self.api.fetch_job_logs(
            job_id=job_id, namespace=self.namespace, follow=follow, tail=tail
        )
