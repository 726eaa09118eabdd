"""The latency model: prefill, decode and batching slowdown."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from replica_entry.sim.latency import LatencyModel

figures = st.floats(min_value=0.0, max_value=10.0, allow_nan=False)
counts = st.integers(min_value=0, max_value=10_000)


def test_all_zero_by_default() -> None:
    assert LatencyModel().request_s(1_000, 100, 50) == 0.0


def test_the_documented_formula() -> None:
    model = LatencyModel(overhead_s=0.5, prompt_token_s=0.01, gen_token_s=0.1, batch_factor=0.25)
    # (0.5 + 100 * 0.01 + 20 * 0.1) * (1 + 0.25 * 4)
    assert model.request_s(100, 20, 4) == pytest.approx(7.0)
    assert model.prefill_s(100, 4) == pytest.approx(3.0)
    assert model.decode_step_s(4) == pytest.approx(0.2)


def test_negative_figures_are_refused() -> None:
    with pytest.raises(ValueError, match="non-negative"):
        LatencyModel(gen_token_s=-1.0)


@given(figures, figures, figures, figures, counts, counts, counts)
def test_more_work_or_load_never_takes_less_time(
    overhead: float, prompt: float, gen: float, factor: float, uncached: int, steps: int, busy: int
) -> None:
    model = LatencyModel(overhead, prompt, gen, factor)
    base = model.request_s(uncached, steps, busy)
    assert base >= 0.0
    assert model.request_s(uncached + 1, steps, busy) >= base
    assert model.request_s(uncached, steps + 1, busy) >= base
    assert model.request_s(uncached, steps, busy + 1) >= base
    assert model.request_s(uncached, steps, busy) == pytest.approx(
        model.prefill_s(uncached, busy) + steps * model.decode_step_s(busy)
    )


def test_from_the_later_version_on_a_token_costs_the_later_time() -> None:
    model = LatencyModel(gen_token_s=0.1, batch_factor=1.0, later_version=3, later_gen_token_s=0.01)
    assert model.decode_step_s(0, "trl-policy-v2") == pytest.approx(0.1)
    assert model.decode_step_s(1, "trl-policy-v3") == pytest.approx(0.02)  # still scaled
    assert model.decode_step_s(0, "trl-policy-v12") == pytest.approx(0.01)
    assert model.decode_step_s(0, None) == model.decode_step_s(0, "sim-model") == 0.1
    assert LatencyModel(gen_token_s=0.1).decode_step_s(0, "trl-policy-v9") == 0.1
    assert model.request_s(0, 10, 0, "trl-policy-v3") == pytest.approx(0.1)


def test_a_negative_later_time_is_refused() -> None:
    with pytest.raises(ValueError, match="non-negative"):
        LatencyModel(later_version=1, later_gen_token_s=-1.0)
