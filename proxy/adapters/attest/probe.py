"""The served-policy probe: does a replica sample the policy the trainer trained?

A probe is a fixed token sequence and a few of its prefixes (``adapter_receiver.reference``); a
replica's answer, under one adapter version, is each prefix's ``K`` largest next-token
logprobs, from one short batched completion (``max_tokens`` 1, ``logprobs`` K, temperature 1 and
nothing else that bends the distribution): vLLM's generation path, the one rollouts are sampled
from. It is compared:
- with the trainer's reference, when the version carries one (``PROBE_FILE``, written into the
  version's directory before TRL's atomic rename: the same logprobs, computed by the trainer's
  ranks under the weights they had just saved): the mean absolute gap must stay within the
  tolerance;
- without one (plain TRL pointed at the proxy), with the other replicas' and earlier versions'
  answers (``judge``), on token ids the proxy took from a prompt the trainer sent (it knows no
  vocabulary): ``Captured``.

Tolerance (a mean over the probe's values, in nats): measured on these CPUs in float32, a vLLM
replica's answer and the trainer's forward of the same weights differ by at most 1e-6 (the tiny
model, 8 prefixes of 64 ids, under concurrent rollouts), and the test adapter moves them by 0.02
on average; the default is 1e-3 there. In bf16 on a GPU the kernels differ (vLLM is not
batch-invariant): the default is 0.05 there, unverified until a GPU runs it
(``default_tolerance``).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson

from adapter_receiver.reference import MAX_BYTES, K, Reference, cuts_for, decode
from adapter_receiver.wire import PROBE_FILE
from proxy.fleet.replica import Replica
from proxy.upstream.client import UpstreamClient
from proxy.upstream.errors import ReplyError

log = logging.getLogger("proxy.adapters")

MAX_CAPTURED = 64  # a captured prompt's first ids are the probe (the proxy knows no vocabulary)
TOLERANCE = {"float32": 1e-3, "bfloat16": 0.05, "float16": 0.05}  # by the replicas' dtype


def default_tolerance(dtype: str | None) -> float:
    """The tolerance for replicas computing in ``dtype`` (vLLM's ``model_config.dtype``)."""
    name = (dtype or "").removeprefix("torch.")
    return TOLERANCE.get(name, TOLERANCE["bfloat16"])


def read_reference(directory: str | Path) -> Reference | None:
    """The reference in a version's directory (None: it has none). A malformed one is logged
    and ignored: the version is then judged as plain TRL's are. Blocking."""
    path = Path(directory) / PROBE_FILE
    try:
        with path.open("rb") as file:
            raw = file.read(MAX_BYTES + 1)
    except OSError:
        return None
    try:
        return decode(raw)
    except ValueError as exc:
        log.warning("probe reference %s ignored: %s", path, exc)
        return None


def gap(a: Sequence[float], b: Sequence[float]) -> float:
    """The mean absolute difference of two answers of one probe."""
    return sum(abs(x - y) for x, y in zip(a, b, strict=True)) / max(len(a), 1)


async def ask(
    client: UpstreamClient,
    replica: Replica,
    model: str,
    probe: tuple[Sequence[int], Sequence[int]],
    timeout_s: float,
) -> tuple[float, ...]:
    """``replica``'s answer to the probe ``(ids, cuts)`` under ``model``. Raises
    ``UpstreamError`` (``ReplyError`` for an answer that is not one)."""
    body = orjson.dumps(request(model, *probe))
    reply = await client.call(replica, "POST", "/v1/completions", body=body, timeout_s=timeout_s)
    if reply.status != 200:
        raise ReplyError(f"the probe answered HTTP {reply.status}: {reply.body[:200]!r}")
    return parse_answer(reply.json(), len(probe[1]))


def request(model: str, ids: Sequence[int], cuts: Sequence[int]) -> dict[str, Any]:
    """The probe's completion request: one prompt per cut, one token each, ``K`` top logprobs
    of the model's own distribution (temperature 1; no top-k, top-p, min-p or penalty, whatever
    the server's generation config; tokens named by id)."""
    return {"model": model, "prompt": [list(ids[:cut]) for cut in cuts], "max_tokens": 1,
            "logprobs": K, "temperature": 1.0, "top_p": 1.0, "top_k": -1, "min_p": 0.0,
            "repetition_penalty": 1.0, "presence_penalty": 0.0, "frequency_penalty": 0.0,
            "return_tokens_as_token_ids": True}  # fmt: skip


def parse_answer(answer: Any, prompts: int) -> tuple[float, ...]:
    """Each prompt's ``K`` largest first-token logprobs, descending, prompt by prompt, from a
    completion answer (vLLM lists the sampled token among them, or beside them as one more)."""
    try:
        choices = sorted(answer["choices"], key=lambda choice: int(choice["index"]))
        if len(choices) != prompts:
            raise ValueError(f"{len(choices)} choices for {prompts} prompts")
        values: list[float] = []
        for choice in choices:
            top = sorted((float(x) for x in choice["logprobs"]["top_logprobs"][0].values()),
                         reverse=True)  # fmt: skip
            if len(top) < K:
                raise ValueError(f"{len(top)} top logprobs, not {K}")
            values.extend(top[:K])
    except (KeyError, IndexError, TypeError, ValueError, AttributeError) as exc:
        raise ReplyError(f"the probe's answer has no top logprobs ({exc!r})") from None
    return tuple(values)


class Captured:
    """Token ids of a prompt the trainer sent, taken once (the probe without a reference)."""

    def __init__(self) -> None:
        self.ids: tuple[int, ...] | None = None

    @property
    def probe(self) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
        """``(ids, cuts)``, once taken."""
        return None if self.ids is None else (self.ids, cuts_for(len(self.ids)))

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
        self.ids = tuple(value[:MAX_CAPTURED])
        return True
