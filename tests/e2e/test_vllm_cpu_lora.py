"""The CPU LoRA ops fix ``replica_entry`` installs in its vLLM (``replica_entry.vllm_cpu_lora``):
the installed ops apply the last adapter slot to a base-model token (vLLM #48421), the wrapped
ones leave its rows as they were and compute every other row exactly as before, and vLLM finds
the plugin (the contract suite's mixed-batch probe test is the end-to-end proof)."""

from __future__ import annotations

from collections.abc import Callable
from importlib.metadata import entry_points
from typing import Any

import pytest

from replica_entry.vllm_cpu_lora import OPS, aliases_last_slot, apply, skipping_no_lora

SLOTS, TOKENS, RANK, WIDTH = 3, 6, 4, 10


def _original(name: str) -> Callable[..., Any]:
    from vllm.lora.ops.torch_ops import lora_ops

    op: Callable[..., Any] = getattr(lora_ops, name)
    original: Callable[..., Any] = getattr(op, "__wrapped__", op)
    return original


def _case(name: str) -> tuple[Any, Any, Any, tuple[Any, ...]]:
    """inputs, weights, output, extra args of ``name`` for TOKENS tokens, two of slot -1."""
    import torch

    torch.manual_seed(0)
    shrink = name == "bgmv_shrink"
    inputs = torch.randn(TOKENS, WIDTH if shrink else RANK)
    weights = torch.randn(SLOTS, RANK if shrink else WIDTH, WIDTH if shrink else RANK)
    output = torch.randn(TOKENS, RANK if shrink else 2 * WIDTH)
    extra: tuple[Any, ...] = {"bgmv_shrink": (0.5,), "bgmv_expand": (True,)}.get(
        name,
        (WIDTH, WIDTH, True),  # bgmv_expand_slice: the second half of the output
    )
    return inputs, weights, output, extra


def test_vllm_s_cpu_ops_apply_the_last_slot_to_a_base_model_token() -> None:
    assert aliases_last_slot(_original("bgmv_expand"))
    assert not aliases_last_slot(skipping_no_lora(_original("bgmv_expand")))


@pytest.mark.parametrize("name", OPS)
def test_the_wrapped_op_skips_base_model_tokens_and_changes_no_other_row(name: str) -> None:
    import torch

    indices = torch.tensor([0, -1, 2, 1, -1, 2])
    inputs, weights, output, extra = _case(name)
    before = output.clone()
    expected = output.clone()
    _original(name)(inputs, weights, expected, indices, *extra)
    skipping_no_lora(_original(name))(inputs, weights, output, indices, *extra)
    base = indices < 0
    assert torch.equal(output[base], before[base])  # left as they were (the GPU kernels' skip)
    assert torch.equal(output[~base], expected[~base])  # bit for bit as vLLM computes them
    assert not torch.equal(expected[base], before[base])  # ... where vLLM changed them


def test_vllm_runs_the_plugin_and_it_installs_once_where_punica_cpu_calls_the_ops() -> None:
    from vllm.lora.ops.torch_ops import lora_ops
    from vllm.lora.punica_wrapper import punica_cpu

    names = {e.value for e in entry_points(group="vllm.general_plugins")}
    assert "replica_entry.vllm_cpu_lora:apply" in names
    apply()
    apply()
    for name in OPS:
        fixed = getattr(lora_ops, name)
        assert getattr(punica_cpu, name) is fixed
        assert fixed.__wrapped__ is _original(name)  # wrapped once, not twice
    assert not aliases_last_slot(lora_ops.bgmv_expand)
