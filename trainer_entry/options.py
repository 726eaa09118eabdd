"""What the trainer command line decides: one frozen object, built once at the edge.

The launcher hands it to every rank as JSON (``to_json``/``from_json``, environment variable
``OPTIONS_ENV``), so a rank never parses a command line and every rank trains on the same values.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields, is_dataclass
from pathlib import Path
from typing import Any, get_type_hints

from trainer_entry.recipe import Recipe

OPTIONS_ENV = "ROLLOUT_TRAINER_OPTIONS"


@dataclass(frozen=True)
class Topology:
    """How TRL reaches the replicas.

    ``sidecar_replicas`` (or ``sidecar_discover``, the proxy's ``--discover`` spec that finds
    them): start the proxy beside the trainer in front of these replicas,
    listening on ``sidecar_host:sidecar_port`` (port 0: a free one), sending the bearer token
    read from the environment variable ``replica_token_env`` to the replicas. Else
    ``proxy_url``: a proxy elsewhere, reached through a local relay that pushes adapter versions
    to it and adds the bearer token read from the environment variable ``proxy_token_env``
    (when one is named).
    ``proxy_args`` go to the local proxy's command line unchanged. With ``fleet_key_env``, the
    run (the ``/runs/<run>`` of ``proxy_url``) is declared on that proxy, with ``run_weight``,
    for as long as the run lasts.
    """

    sidecar_replicas: tuple[str, ...] = ()
    sidecar_discover: str | None = None
    sidecar_host: str = "127.0.0.1"
    sidecar_port: int = 0
    replica_token_env: str = "HF_TOKEN"
    proxy_url: str | None = None
    proxy_token_env: str | None = None
    proxy_args: tuple[str, ...] = ()
    fleet_key_env: str | None = None  # a run on a shared fleet (``trainer_entry.fleet_run``)
    run_weight: float = 1.0

    @property
    def sidecar(self) -> bool:
        return bool(self.sidecar_replicas) or self.sidecar_discover is not None


@dataclass(frozen=True)
class World:
    """The ranks of the run: ``num_processes`` on each of ``nnodes`` machines, which meet at
    ``master_addr:master_port`` (node 0's address; torch's static rendezvous). Node 0's first
    rank runs TRL's rollout worker, and node 0 alone runs the proxy side."""

    num_processes: int = 1
    nnodes: int = 1
    node_rank: int = 0
    master_addr: str = "127.0.0.1"
    master_port: int = 29500

    @property
    def world_size(self) -> int:
        return self.num_processes * self.nnodes

    @property
    def main_node(self) -> bool:
        return self.node_rank == 0


@dataclass(frozen=True)
class Checkpoints:
    """A checkpoint every ``save_steps`` steps and whenever ``save_minutes`` have passed since
    the last one (0: no time rule), the newest ``save_total_limit`` kept. ``resume``: ``auto``
    (the newest complete checkpoint in the output directory, else a fresh start), ``never``, or
    one checkpoint directory."""

    save_steps: int = 20
    save_minutes: float = 30.0
    save_total_limit: int = 3
    resume: str = "auto"


@dataclass(frozen=True)
class TrainerOptions:
    model: str
    dataset: str
    output_dir: Path
    topology: Topology
    world: World = field(default_factory=World)
    checkpoints: Checkpoints = field(default_factory=Checkpoints)
    recipe: Recipe = field(default_factory=Recipe)
    dataset_config: str | None = None
    dataset_split: str = "train"
    prompt_column: str = "prompt"
    answer_column: str = "answer"
    system_prompt: str | None = None
    format_instruction: str = ""  # ``--format-instruction`` resolved (trainer_entry.prompts)
    rewards: tuple[str, ...] = ("boxed",)
    response_template: str | None = None
    max_steps: int = 500
    seed: int = 0
    report_to: str = "none"
    probe_reference: bool = True  # each version carries the served-policy probe's reference
    server_timeout_s: float = 240.0
    resume_from: Path | None = None  # the launcher's choice (``Checkpoints.resume`` resolved)
    # Where TRL saves each adapter version (``trainer_entry.lora_dir``): the flag, then node 0's
    # launcher's choice; None with ``adapters_in_bucket`` (TRL's own ``<output_dir>/.vllm_lora``).
    adapters_local: Path | None = None
    adapters_in_bucket: bool = False

    def to_json(self) -> str:
        return json.dumps(asdict(self), default=str)

    @classmethod
    def from_json(cls, text: str) -> TrainerOptions:
        built: TrainerOptions = _build(cls, json.loads(text))
        return built


def _build(kind: Any, data: dict[str, Any]) -> Any:
    """A frozen dataclass from ``asdict`` output: nested dataclasses, tuples and paths restored."""
    hints = get_type_hints(kind)
    values: dict[str, Any] = {}
    for spec in fields(kind):
        value, hint = data[spec.name], hints[spec.name]
        if is_dataclass(hint):
            value = _build(hint, value)
        elif isinstance(value, list):
            value = tuple(value)
        elif value is not None and Path in getattr(hint, "__args__", (hint,)):
            value = Path(value)
        values[spec.name] = value
    return kind(**values)
