"""``examples/proxy.toml``, the config file a user copies, loads through the real settings loader
(flags, environment, file) with the values it says it sets."""

from __future__ import annotations

from pathlib import Path

from proxy.cli import load_settings

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "proxy.toml"


def test_the_example_config_loads_with_its_values() -> None:
    settings = load_settings(["--config", str(EXAMPLE)])
    assert (settings.host, settings.port) == ("0.0.0.0", 8000)
    assert settings.discover == "dns:replicas:8000"
    assert settings.limits.max_inflight_per_replica == 128
    assert settings.policy.kind == "prefix"
    assert settings.adapters.dir == Path("/bucket/run-1/.vllm_lora")
    assert settings.adapters.push is True


def test_a_flag_still_beats_the_example_file() -> None:
    settings = load_settings(["--config", str(EXAMPLE), "--port", "8100"])
    assert settings.port == 8100 and settings.host == "0.0.0.0"
