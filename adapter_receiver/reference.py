"""The served-policy probe, as the trainer and the proxy both define it, and its reference file
(``FILE``): what the trainer writes beside each adapter version's weights and the proxy reads to
check what a replica serves. Standard library only (the trainer and the proxy both import it).

The probe is a token sequence ``ids`` and a few prefix lengths ``cuts`` of it; its answer, for
each prefix, is the ``K`` largest next-token log-probabilities (natural log, temperature 1, no
top-k/top-p/penalty), in descending order: what vLLM's generation path returns as
``top_logprobs`` for the first sampled token of each prefix, so the probe reads the same
LoRA-applied logits the rollouts are sampled from. (Not ``prompt_logprobs``: vLLM 0.32's LoRA
logits processor maps them wrongly when they share a batch with other requests, a shape error
that kills the engine on CPU, vLLM #16668, and drops an ``lm_head`` LoRA's delta, #51594.)

The file is one JSON object::

    {"format": 1, "ids": [151644, 8948, ...], "cuts": [8, 16, ...], "k": 20,
     "top": [[-0.02, -4.1, ...], ...]}

one ``top`` row of ``k`` values per cut; at most ``MAX_BYTES``. It is written into the version's
directory before the directory becomes visible (the trainer's atomic rename), so a version that
has one has it from its first sight; a version without one is judged without it (the proxy
compares replicas and versions instead).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

FILE = "rollout_probe.json"
FORMAT = 1
MAX_TOKENS = 256
K = 20  # top logprobs per cut: vLLM's default --max-logprobs
CUTS = 8  # prefixes probed
MAX_BYTES = 64 * 1024


@dataclass(frozen=True, slots=True)
class Reference:
    """The probe the trainer computed: its ids, its cuts, and each cut's top ``K`` logprobs
    (flattened, cut-major)."""

    ids: tuple[int, ...]
    cuts: tuple[int, ...]
    top: tuple[float, ...]


def cuts_for(length: int, count: int = CUTS) -> tuple[int, ...]:
    """``count`` prefix lengths spread evenly over a probe of ``length`` ids, the whole last."""
    return tuple(sorted({max(1, round(length * i / count)) for i in range(1, count + 1)}))


def encode(ids: Sequence[int], cuts: Sequence[int], top: Sequence[Sequence[float]]) -> bytes:
    """A reference file's bytes. Raises ValueError for a probe the proxy would not read."""
    body = {"format": FORMAT, "ids": [int(i) for i in ids], "cuts": [int(c) for c in cuts],
            "k": K, "top": [[float(x) for x in row] for row in top]}  # fmt: skip
    raw = json.dumps(body).encode()
    decode(raw)  # what the proxy will check
    return raw


def decode(raw: bytes) -> Reference:
    """A reference file's content. Raises ValueError naming what is wrong with it."""
    if len(raw) > MAX_BYTES:
        raise ValueError(f"over {MAX_BYTES} bytes")
    try:
        data = json.loads(raw)
        if data.get("format") != FORMAT:
            raise ValueError(f"format {data.get('format')!r}, not {FORMAT}")
        if data.get("k") != K:
            raise ValueError(f"k {data.get('k')!r}, not {K}")
        ids, cuts, top = data["ids"], data["cuts"], data["top"]
        if not all(isinstance(x, list) for x in (ids, cuts, top, *top)):
            raise TypeError("ids, cuts and top are lists")
        ids, cuts = tuple(int(i) for i in ids), tuple(int(c) for c in cuts)
        rows = [tuple(float(x) for x in row) for row in top]
    except (KeyError, TypeError, AttributeError) as exc:
        raise ValueError(f"not a reference ({exc!r})") from None
    if not 1 <= len(ids) <= MAX_TOKENS or any(i < 0 for i in ids):
        raise ValueError(f"{len(ids)} ids (1 to {MAX_TOKENS}, none negative)")
    if not 1 <= len(cuts) <= CUTS or list(cuts) != sorted(set(cuts)):
        raise ValueError(f"cuts {list(cuts)} (1 to {CUTS}, increasing)")
    if cuts[0] < 1 or cuts[-1] > len(ids):
        raise ValueError(f"cuts {list(cuts)} outside the {len(ids)} ids")
    if len(rows) != len(cuts) or any(len(row) != K for row in rows):
        raise ValueError(f"top is not {len(cuts)} rows of {K}")
    return Reference(ids, cuts, tuple(x for row in rows for x in row))
