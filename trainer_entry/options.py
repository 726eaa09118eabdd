"""What the trainer command line decides: one frozen object, built once at the edge."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Topology:
    """How TRL reaches the replicas.

    ``sidecar_replicas``: start the proxy beside the trainer in front of these replicas,
    listening on ``sidecar_host:sidecar_port`` (port 0: a free one), sending the bearer token
    read from the environment variable ``replica_token_env`` to the replicas. Else
    ``proxy_url``: a proxy elsewhere, reached through a local relay that pushes adapter versions
    to it and adds the bearer token read from the environment variable ``proxy_token_env``
    (when one is named).
    ``proxy_args`` go to the local proxy's command line unchanged.
    """

    sidecar_replicas: tuple[str, ...] = ()
    sidecar_host: str = "127.0.0.1"
    sidecar_port: int = 0
    replica_token_env: str = "HF_TOKEN"
    proxy_url: str | None = None
    proxy_token_env: str | None = None
    proxy_args: tuple[str, ...] = ()


@dataclass(frozen=True)
class TrainerOptions:
    model: str
    dataset: str
    output_dir: Path
    topology: Topology
    dataset_config: str | None = None
    dataset_split: str = "train"
    prompt_column: str = "prompt"
    answer_column: str = "answer"
    system_prompt: str | None = None
    rewards: tuple[str, ...] = ("math", "format")
    lora_rank: int = 1
    lora_alpha: int | None = None
    lora_target_modules: tuple[str, ...] = (
        "q_proj",
        "k_proj",
        "v_proj",
        "o_proj",
        "gate_proj",
        "up_proj",
        "down_proj",
    )
    max_steps: int = 100
    num_generations: int = 8
    batch_size: int | None = None
    max_completion_length: int = 256
    learning_rate: float = 1e-5
    temperature: float = 1.0
    max_staleness: int = 4
    weight_sync_steps: int = 1
    max_inflight_tasks: int = -1
    token_budget: int | None = None
    gradient_checkpointing: bool = True
    save_steps: int = 0
    resume: str | None = None
    seed: int = 0
    report_to: str = "none"
    server_timeout_s: float = 240.0
