"""LoRA adapters of one replica: runtime load/unload with vLLM's rules and answers.

Rules (vLLM's ``OpenAIServingModels``): both ``lora_name`` and ``lora_path`` are required; a
name already loaded is refused unless ``load_inplace``; more adapters than ``max_loras`` may be
registered (vLLM swaps them in and out of its GPU slots). The directory must hold
``adapter_config.json`` or the load fails with vLLM's ``No adapter found`` 404.

The mount lag: the replica reads adapters through a lagging bucket mount, so a path counts as
present only once ``mount_lag_s`` has passed since its mtime/ctime (whichever is later) on the
injected wall clock. A directory that is visible but whose weights are not yet is refused as
vLLM refuses a directory without tensors (a 400, not retryable by the "No adapter found" rule).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from replica_entry.sim.errors import ApiError
from replica_entry.sim.policy import BASE, content_policy

CONFIG_FILE = "adapter_config.json"
WEIGHT_FILES = ("adapter_model.safetensors", "adapter_model.bin")


class LoadRequest(BaseModel):
    model_config = ConfigDict(extra="allow")
    lora_name: str
    lora_path: str
    load_inplace: bool = False


class UnloadRequest(BaseModel):
    model_config = ConfigDict(extra="allow")
    lora_name: str
    lora_int_id: int | None = None


@dataclass(frozen=True, slots=True)
class Adapter:
    name: str
    path: str
    created: int
    policy: str = BASE  # its content (``policy.content_policy``)
    previous: str = BASE  # the last other content loaded before it (a faulty replica's answer)


REMEMBERED_CONTENTS = 256  # contents whose predecessor a faulty replica answers with


class AdapterRegistry:
    """Loaded adapters by name, in load order (the order ``/v1/models`` lists them)."""

    def __init__(self, max_lora_rank: int, clock: Callable[[], float] = time.time) -> None:
        self.max_lora_rank = max_lora_rank
        self._clock = clock
        self._adapters: dict[str, Adapter] = {}
        self._last = BASE  # the content loaded last
        self._before: dict[str, str] = {}  # content -> the other content loaded before it first

    def get(self, name: str) -> Adapter | None:
        return self._adapters.get(name)

    def __contains__(self, name: str) -> bool:
        return name in self._adapters

    def listed(self) -> list[Adapter]:
        return list(self._adapters.values())

    def load(self, request: LoadRequest, mount_lag_s: float) -> str:
        """Register an adapter; returns vLLM's success text or raises its error."""
        name, path = request.lora_name, request.lora_path
        if not name or not path:
            raise ApiError(
                "Both 'lora_name' and 'lora_path' must be provided.", err_type="InvalidUserInput"
            )
        if name in self._adapters and not request.load_inplace:
            raise ApiError(
                f"The lora adapter '{name}' has already been loaded. If you want to load the "
                "adapter in place, set 'load_inplace' to True.",
                err_type="InvalidUserInput",
            )
        self._check_files(name, path, mount_lag_s)
        previous = self._adapters.get(name)
        created = previous.created if previous else int(self._clock())
        policy = content_policy(Path(path))
        if policy not in self._before:  # a reload keeps what came before it the first time
            self._before[policy] = self._last
            while len(self._before) > REMEMBERED_CONTENTS:
                del self._before[next(iter(self._before))]
        self._last = policy
        self._adapters[name] = Adapter(name, path, created, policy, self._before[policy])
        return f"Success: LoRA adapter '{name}' added successfully."

    def unload(self, request: UnloadRequest) -> str:
        name = request.lora_name
        if not name:
            raise ApiError(
                "'lora_name' needs to be provided to unload a LoRA adapter.",
                err_type="InvalidUserInput",
            )
        if self._adapters.pop(name, None) is None:
            raise ApiError(
                f"The lora adapter '{name}' cannot be found.", status=404, err_type="NotFoundError"
            )
        return f"Success: LoRA adapter '{name}' removed successfully."

    def _check_files(self, name: str, path_text: str, mount_lag_s: float) -> None:
        now = self._clock()
        path = Path(path_text)
        if not (
            _visible(path, mount_lag_s, now) and _visible(path / CONFIG_FILE, mount_lag_s, now)
        ):
            raise ApiError(
                f"Loading lora {name} failed: No adapter found for {path_text}",
                status=404,
                err_type="NotFoundError",
            )
        if not any(_visible(path / weights, mount_lag_s, now) for weights in WEIGHT_FILES):
            raise ApiError(f"{path_text} doesn't contain tensors")
        rank = _rank(path / CONFIG_FILE)
        if rank > self.max_lora_rank:
            raise ApiError(f"LoRA rank {rank} is greater than max_lora_rank {self.max_lora_rank}.")


def _visible(path: Path, mount_lag_s: float, now: float) -> bool:
    """Whether ``path`` exists as seen through a mount that lags ``mount_lag_s`` seconds."""
    try:
        stat = os.stat(path)
    except OSError:
        return False
    return mount_lag_s <= 0 or now - max(stat.st_mtime, stat.st_ctime) >= mount_lag_s


def _rank(config_path: Path) -> int:
    try:
        config = json.loads(config_path.read_text())
        rank = config.get("r", 0) if isinstance(config, dict) else 0
    except (OSError, ValueError) as exc:
        raise ApiError(f"Invalid adapter config {config_path}: {exc}") from None
    if not isinstance(rank, int):
        raise ApiError(f"Invalid adapter config {config_path}: 'r' must be an integer")
    return rank
