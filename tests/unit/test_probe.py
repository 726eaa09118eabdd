"""The served-policy probe's parts: the trainer's reference file, a replica's answer as vLLM
gives it, the prompt a probe is taken from, and the tolerance by dtype."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from adapter_receiver.reference import (
    CUTS,
    MAX_BYTES,
    MAX_TOKENS,
    K,
    Reference,
    cuts_for,
    decode,
    encode,
)
from adapter_receiver.wire import PROBE_FILE, adapter_file
from proxy.adapters.attest.probe import (
    MAX_CAPTURED,
    Captured,
    default_tolerance,
    gap,
    parse_answer,
    read_reference,
)
from proxy.upstream.errors import ReplyError

ROW = [-0.5 - i for i in range(K)]


def vllm_choice(index: int, values: list[float], sampled: float | None = None) -> dict[str, object]:
    """A choice as vLLM 0.32 answers the probe: the first token's top logprobs, named by id,
    the sampled token among them or beside them as one more."""
    top = {f"token_id:{100 + i}": v for i, v in enumerate(values)}
    if sampled is not None:
        top["token_id:7"] = sampled
    return {"index": index, "text": "x", "logprobs": {"top_logprobs": [top]}}


def test_cuts_spread_over_the_probe_and_end_at_its_last_id() -> None:
    assert cuts_for(64) == (8, 16, 24, 32, 40, 48, 56, 64)
    assert cuts_for(3) == (1, 2, 3)
    assert len(cuts_for(1000)) == CUTS


def test_a_reference_round_trips_and_travels_with_the_adapter(tmp_path: Path) -> None:
    (tmp_path / PROBE_FILE).write_bytes(encode([5, 17, 3], [1, 3], [ROW, ROW[::-1]]))
    assert read_reference(tmp_path) == Reference((5, 17, 3), (1, 3), (*ROW, *ROW[::-1]))
    assert adapter_file(PROBE_FILE)  # pushed with the weights
    assert read_reference(tmp_path / "absent") is None


GOOD = {"format": 1, "ids": [1, 2, 3], "cuts": [1, 3], "k": K, "top": [ROW, ROW]}


@pytest.mark.parametrize(
    ("patch", "says"),
    [
        ({"format": 2}, "format 2"),
        ({"k": 5}, "k 5"),
        ({"cuts": [3, 1]}, "increasing"),
        ({"cuts": [1, 4]}, "outside the 3 ids"),
        ({"cuts": [0, 3]}, "outside"),
        ({"top": [ROW]}, "2 rows"),
        ({"top": [ROW, ROW[:-1]]}, "2 rows"),
        ({"ids": [1, -2, 3]}, "none negative"),
        ({"ids": "123"}, "not a reference"),
        ({"top": None}, "not a reference"),
    ],
)
def test_a_malformed_reference_is_named_and_ignored(
    tmp_path: Path, patch: dict[str, object], says: str, caplog: pytest.LogCaptureFixture
) -> None:
    body = {**GOOD, **patch}
    with pytest.raises(ValueError, match=says):
        decode(json.dumps(body).encode())
    (tmp_path / PROBE_FILE).write_text(json.dumps(body))
    assert read_reference(tmp_path) is None  # judged as plain TRL's versions are
    assert says in caplog.text


def test_an_oversized_or_unreadable_reference_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="ids"):
        encode(list(range(MAX_TOKENS + 1)), [1], [ROW])
    (tmp_path / PROBE_FILE).write_bytes(b" " * (MAX_BYTES + 1))
    assert read_reference(tmp_path) is None
    (tmp_path / PROBE_FILE).write_bytes(b"\xff{")
    assert read_reference(tmp_path) is None


def test_a_replicas_answer_is_read_as_vllm_gives_it() -> None:
    answer = {"choices": [vllm_choice(1, ROW[::-1], sampled=-30.0), vllm_choice(0, ROW)]}
    assert parse_answer(answer, 2) == (*ROW, *ROW)  # by index, each sorted, the extra dropped
    with pytest.raises(ReplyError, match="1 choices for 2 prompts"):
        parse_answer({"choices": [vllm_choice(0, ROW)]}, 2)
    with pytest.raises(ReplyError, match=f"{K - 1} top logprobs"):
        parse_answer({"choices": [vllm_choice(0, ROW[1:])]}, 1)
    with pytest.raises(ReplyError, match="no top logprobs"):
        parse_answer({"choices": [{"index": 0, "text": "x", "logprobs": None}]}, 1)


def test_the_gap_is_the_mean_absolute_difference() -> None:
    assert gap([-1.0, -2.0], [-1.5, -1.0]) == pytest.approx(0.75)
    assert gap([], []) == 0.0
    with pytest.raises(ValueError, match="longer"):
        gap([-1.0], [-1.0, -2.0])


@pytest.mark.parametrize(
    ("prompt", "taken"),
    [
        (b"[1, 2, 3]", (1, 2, 3)),
        (b"[1]", None),  # one token has no logprob to compare
        (b'"text"', None),  # the proxy knows no vocabulary: ids only
        (b"[[1, 2], [3, 4]]", None),  # a batch of prompts
        (b"[1, -2]", None),
        (b"[1, true]", None),
        (b"[1, 2.5]", None),
        (b"[1, 2", None),
    ],
)
def test_a_probe_is_taken_from_a_token_id_prompt(prompt: bytes, taken: object) -> None:
    captured = Captured()
    assert captured.offer(prompt) is (taken is not None)
    assert captured.ids == taken


def test_a_long_prompt_gives_its_first_ids() -> None:
    captured = Captured()
    assert captured.offer(json.dumps(list(range(500))).encode())
    assert captured.ids == tuple(range(MAX_CAPTURED))


def test_the_tolerance_follows_the_replicas_dtype() -> None:
    assert default_tolerance("float32") == default_tolerance("torch.float32") == 1e-3
    assert default_tolerance("bfloat16") == default_tolerance(None) == 0.05
