"""TRL's weight-sync calls, carried across a gap of the proxy.

TRL 1.16's ``VLLMClient`` sends ``load_lora_adapter``, ``unload_lora_adapter``, ``pause`` and
``resume`` once, and a connection error (the port refused while a proxy restarts unsupervised;
the connection reset when the proxy died with the call in flight) ends the run: TRL retries
completions, never a sync. Each of the four is idempotent at the proxy (a load of files it has,
or is loading, joins or is done; an unload of a name it does not want, a pause, a resume change
nothing more), so ``RetryingClient`` sends one again after a connection error, backing off
(``RETRY``), until the call's own timeout has passed. An answer, whatever its status, is TRL's
to judge: never retried here.

TRL has no hook for its client: ``install(trainer)`` swaps rank 0's ``trainer.vllm_client`` for
a ``RetryingClient`` made from the same URL and timeout, once the trainer is built (TRL reads
the attribute at each sync; the rollout worker keeps TRL's own, which it never syncs with). A
subclass at module level, it pickles as TRL's does. Plain TRL pointed at a proxy keeps TRL's
behaviour. Imports TRL (the heavy tier).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any, TypeVar

import requests
from trl.experimental.async_grpo.vllm_client import VLLMClient

from proxy.clock import Backoff

log = logging.getLogger("trainer_entry")

RETRY = Backoff(first_s=0.5, max_s=5.0)  # between attempts of one sync call
T = TypeVar("T")


def retried(call: Callable[[], T], what: str, budget_s: float) -> T:
    """``call()``, sent again after each connection error until ``budget_s`` has passed."""
    deadline, attempt = time.monotonic() + budget_s, 0
    while True:
        try:
            return call()
        except requests.ConnectionError as exc:
            delay = RETRY.delay(attempt)
            attempt += 1
            if time.monotonic() + delay > deadline:
                raise
            log.warning("%s: the proxy could not be reached (%s); sent again in %.1f s "
                        "(attempt %d)", what, type(exc).__name__, delay, attempt + 1)  # fmt: skip
            time.sleep(delay)


class RetryingClient(VLLMClient):  # type: ignore[misc]
    """TRL's client, its four sync calls ``retried``."""

    def load_lora_adapter(self, lora_name: str, lora_path: str, timeout: int = 1800) -> None:
        call = super().load_lora_adapter
        retried(lambda: call(lora_name, lora_path, timeout), f"load of {lora_name}", timeout)

    def unload_lora_adapter(self, lora_name: str, timeout: int = 1800) -> None:
        call = super().unload_lora_adapter
        retried(lambda: call(lora_name, timeout), f"unload of {lora_name}", timeout)

    def pause(self, timeout: int = 1800) -> None:
        call = super().pause
        retried(lambda: call(timeout), "pause", timeout)

    def resume(self, timeout: int = 1800) -> None:
        call = super().resume
        retried(lambda: call(timeout), "resume", timeout)


def install(trainer: Any) -> None:
    """Rank 0's client (the one that syncs) becomes a ``RetryingClient``; other ranks have none."""
    client = trainer.vllm_client
    if client is not None:
        trainer.vllm_client = RetryingClient(client.server_url, client.server_timeout)
