"""The served-policy probe: does a replica sample the policy the trainer trained?

A probe is a fixed token sequence; a replica's answer is the teacher-forced log-probability of
each of its tokens after the first, under one adapter version (vLLM's ``prompt_logprobs``: one
short completion, ``max_tokens`` 1; the prompt's logprobs skip vLLM's prefix cache and its
sampling processors, so they are the model's own, at temperature 1). It is compared:
- with the trainer's reference, when the version carries one (``PROBE_FILE``, written into the
  version's directory before TRL's atomic rename: the same logprobs, computed by the trainer's
  ranks under the weights they had just saved): the mean absolute gap must stay within the
  tolerance (``Reference``, ``gap``);
- without one (plain TRL pointed at the proxy), with the other replicas' and earlier versions'
  answers (``judge``), on token ids the proxy took from a prompt the trainer sent (it knows no
  vocabulary): ``Captured``.

Tolerance (a mean over the probe's positions, in nats): measured on these CPUs in float32, a
replica's answer and the trainer's forward of the same weights differ by at most 5e-7 (the tiny
model, 64 positions), and one LoRA step moves them by ~0.2; the default is 1e-3 there. In bf16 on
a GPU the kernels differ (vLLM is not batch-invariant): the default is 0.05 there, unverified
until a GPU runs it (``default_tolerance``).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from adapter_receiver.wire import PROBE_FILE
from proxy.fleet.replica import Replica
from proxy.upstream.client import UpstreamClient
from proxy.upstream.errors import ReplyError

log = logging.getLogger("proxy.adapters")

FORMAT = 1
MAX_TOKENS = 256  # the longest probe taken (a captured prompt is cut to ``CAPTURED_TOKENS``)
CAPTURED_TOKENS = 64
MAX_FILE_BYTES = 64 * 1024
TOLERANCE = {"float32": 1e-3, "bfloat16": 0.05, "float16": 0.05}  # by the replicas' dtype


def default_tolerance(dtype: str | None) -> float:
    """The tolerance for replicas computing in ``dtype`` (vLLM's ``model_config.dtype``)."""
    name = (dtype or "").removeprefix("torch.")
    return TOLERANCE.get(name, TOLERANCE["bfloat16"])


@dataclass(frozen=True, slots=True)
class Reference:
    """The probe the trainer computed: its token ids, and each one's logprob after the first."""

    ids: tuple[int, ...]
    logprobs: tuple[float, ...]


def read_reference(directory: str | Path) -> Reference | None:
    """The reference in a version's directory (None: it has none). A malformed one is logged
    and ignored: the version is then judged as plain TRL's are. Blocking."""
    path = Path(directory) / PROBE_FILE
    try:
        raw = path.read_bytes()[: MAX_FILE_BYTES + 1]
    except OSError:
        return None
    try:
        if len(raw) > MAX_FILE_BYTES:
            raise ValueError(f"over {MAX_FILE_BYTES} bytes")
        data = json.loads(raw)
        if data.get("format") != FORMAT:
            raise ValueError(f"format {data.get('format')!r}")
        ids = tuple(int(i) for i in data["ids"])
        logprobs = tuple(float(x) for x in data["logprobs"])
        if not 2 <= len(ids) <= MAX_TOKENS or len(logprobs) != len(ids) - 1:
            raise ValueError(f"{len(ids)} ids and {len(logprobs)} logprobs")
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        log.warning("probe reference %s ignored: %s", path, exc)
        return None
    return Reference(ids, logprobs)


def reference_body(ids: Sequence[int], logprobs: Sequence[float]) -> bytes:
    """A reference file's bytes (what the trainer writes)."""
    return json.dumps({"format": FORMAT, "ids": list(ids), "logprobs": list(logprobs)}).encode()


def gap(a: Sequence[float], b: Sequence[float]) -> float:
    """The mean absolute difference of two answers of one probe."""
    return sum(abs(x - y) for x, y in zip(a, b, strict=True)) / max(len(a), 1)


async def ask(
    client: UpstreamClient, replica: Replica, model: str, ids: Sequence[int], timeout_s: float
) -> tuple[float, ...]:
    """``replica``'s answer to the probe ``ids`` under ``model``. Raises ``UpstreamError``
    (``ReplyError`` for an answer that is not one)."""
    body = {"model": model, "prompt": list(ids), "max_tokens": 1, "prompt_logprobs": 0,
            "temperature": 1.0}  # fmt: skip
    reply = await client.call(
        replica, "POST", "/v1/completions", body=orjson.dumps(body), timeout_s=timeout_s
    )
    if reply.status != 200:
        raise ReplyError(f"the probe answered HTTP {reply.status}: {reply.body[:200]!r}")
    return parse_answer(reply.json(), ids)


def parse_answer(answer: Any, ids: Sequence[int]) -> tuple[float, ...]:
    """Each probe token's logprob after the first, from a completion's ``prompt_logprobs``."""
    try:
        positions = answer["choices"][0]["prompt_logprobs"]
        return tuple(float(positions[i][str(ids[i])]["logprob"]) for i in range(1, len(ids)))
    except (KeyError, IndexError, TypeError, ValueError) as exc:
        raise ReplyError(f"the probe's answer has no prompt_logprobs ({exc!r})") from None


class Captured:
    """Token ids of a prompt the trainer sent, taken once (the probe without a reference)."""

    def __init__(self) -> None:
        self.ids: tuple[int, ...] | None = None

    @property
    def wanted(self) -> bool:
        return self.ids is None

    def offer(self, prompt: bytes) -> bool:
        """A completion's ``prompt`` value, as sent; True when it gave the probe its ids."""
        try:
            value = orjson.loads(prompt)
        except orjson.JSONDecodeError:
            return False
        if not isinstance(value, list) or len(value) < 2:
            return False
        if not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in value):
            return False
        self.ids = tuple(value[:CAPTURED_TOKENS])
        return True
