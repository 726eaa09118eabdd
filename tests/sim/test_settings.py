"""Validation of the replica's settings and faults."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from replica_entry.sim import Faults, SimSettings


def _bad_field(exc: pytest.ExceptionInfo[ValidationError]) -> str:
    return str(exc.value.errors()[0]["loc"][-1])


def test_defaults() -> None:
    settings = SimSettings()
    assert (settings.model, settings.max_model_len, settings.block_size) == ("sim-model", 4096, 16)
    assert settings.effective_max_cpu_loras == settings.max_loras == 6
    assert settings.faults == Faults()
    assert settings.api_key is None


@pytest.mark.parametrize(
    ("patch", "field"),
    [
        ({"fail_status": 399}, "fail_status"),
        ({"fail_status": 600}, "fail_status"),
        ({"fail_status": "500"}, "fail_status"),
        ({"delay_s": -0.1}, "delay_s"),
        ({"mount_lag_s": float("inf")}, "mount_lag_s"),
        ({"unhealthy": "true"}, "unhealthy"),
        ({"drop_mid_response": 1}, "drop_mid_response"),
        ({"nonsense": True}, "nonsense"),
    ],
)
def test_invalid_faults_name_their_field(patch: dict[str, object], field: str) -> None:
    with pytest.raises(ValidationError) as exc:
        Faults().merged(patch)
    assert _bad_field(exc) == field


@given(st.integers(min_value=400, max_value=599), st.floats(min_value=0, max_value=1e6))
def test_valid_faults_merge_and_keep_the_rest(status: int, delay: float) -> None:
    start = Faults(unhealthy=True)
    merged = start.merged({"fail_status": status, "delay_s": delay})
    assert merged == Faults(unhealthy=True, fail_status=status, delay_s=delay)
    assert start == Faults(unhealthy=True)


def test_faults_are_immutable() -> None:
    with pytest.raises(ValidationError):
        Faults().unhealthy = True  # type: ignore[misc]


@pytest.mark.parametrize(
    ("values", "field"),
    [
        ({"max_lora_rank": 3}, "max_lora_rank"),
        ({"max_loras": 6, "max_cpu_loras": 2}, "max_cpu_loras"),
        ({"block_size": 0}, "block_size"),
        ({"vocab_size": 1}, "vocab_size"),
        ({"gen_token_s": -1.0}, "gen_token_s"),
        ({"model": ""}, "model"),
        ({"max_model_len": "4096"}, "max_model_len"),
    ],
)
def test_invalid_settings_name_their_field(values: dict[str, object], field: str) -> None:
    with pytest.raises(ValidationError) as exc:
        SimSettings.model_validate(values)
    assert _bad_field(exc) == field


def test_an_empty_api_key_means_no_key() -> None:
    assert SimSettings(api_key="").api_key is None


def test_max_cpu_loras_is_reported_as_given() -> None:
    assert SimSettings(max_loras=6, max_cpu_loras=8).effective_max_cpu_loras == 8
