"""The adapter-version registry: window, plans, stale copies, leftovers."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxy.adapters.registry import Load, Registry, Unload, Version


def v(
    n: int, path: str | None = None, files: tuple[tuple[str, int, int], ...] | None = None
) -> Version:
    return Version(f"trl-policy-v{n}", path or f"/lora/run/.vllm_lora/trl-policy-v{n}", "client",
                   files)  # fmt: skip


def test_window_follows_max_loras_and_drops_the_oldest() -> None:
    registry = Registry(max_loras=3)
    assert registry.window == 3
    dropped = [name for n in range(1, 6) for name in registry.add(v(n))]
    assert dropped == ["trl-policy-v1", "trl-policy-v2"]
    assert list(registry.versions) == ["trl-policy-v3", "trl-policy-v4", "trl-policy-v5"]
    assert registry.newest() == 5


@pytest.mark.parametrize("staleness", [0, 1, 2])
def test_the_window_keeps_every_version_trl_may_still_ask_for(staleness: int) -> None:
    """TRL at its smallest ``max_loras`` (``max_staleness + 2``): it holds ``staleness + 1``
    versions, loads the next one, and only then unloads the oldest; until that load answers its
    rollouts may still ask for the oldest, so the load must not retire it."""
    registry = Registry(max_loras=staleness + 2)
    for n in range(1, staleness + 2):
        assert registry.add(v(n)) == []
    for n in range(staleness + 2, staleness + 8):
        oldest = f"trl-policy-v{n - 1 - staleness}"
        assert registry.add(v(n)) == []
        assert registry.wanted(oldest) is not None
        registry.remove(oldest)  # TRL's unload, after its load answered


def test_plan_loads_the_window_in_version_order() -> None:
    registry = Registry(window_override=3)
    for n in (3, 1, 2):
        registry.add(v(n))
    plan = registry.plan("r1", manage_unknown=False)
    assert plan == [Load(v(1)), Load(v(2)), Load(v(3))]
    for command in plan:
        assert isinstance(command, Load)
        registry.mark_loaded("r1", command.version)
    assert registry.plan("r1", manage_unknown=False) == []


def test_dropped_versions_are_unloaded_and_never_planned_again() -> None:
    registry = Registry(window_override=2)
    for n in (1, 2):
        registry.add(v(n))
        registry.mark_loaded("r1", v(n))
    registry.add(v(3))
    assert registry.plan("r1", manage_unknown=False) == [Unload("trl-policy-v1"), Load(v(3))]


def test_stale_copy_under_the_same_name_is_replaced() -> None:
    registry = Registry()
    old = v(1, files=(("adapter_model.safetensors", 10, 1),))
    new = v(1, files=(("adapter_model.safetensors", 10, 2),))
    registry.mark_loaded("r1", old)
    registry.add(new)
    assert registry.plan("r1", manage_unknown=False) == [Load(new, replace=True)]


def test_adapters_loaded_before_the_proxy_knew_them() -> None:
    registry = Registry()
    registry.observe("r1", {"trl-policy-v1": "/lora/x", "leftover": "/old/run"})
    registry.add(v(1, path="/lora/x"))
    # The wanted name is reloaded (its files cannot be vouched for); leftovers stay unless a
    # source is configured.
    assert registry.plan("r1", manage_unknown=False) == [Load(v(1, "/lora/x"), replace=True)]
    assert Unload("leftover") in registry.plan("r1", manage_unknown=True)


@given(st.lists(st.integers(1, 40), min_size=1, max_size=60), st.integers(1, 8))
def test_never_more_than_max_loras_planned(numbers: list[int], max_loras: int) -> None:
    registry = Registry(max_loras=max_loras)
    for n in numbers:
        registry.add(v(n))
        for command in registry.plan("r1", manage_unknown=False):
            if isinstance(command, Load):
                registry.mark_loaded("r1", command.version)
            else:
                registry.mark_unloaded("r1", command.name)
        assert len(registry.loaded["r1"]) <= max_loras
    assert max(numbers) == registry.newest()


def test_a_pushed_copy_is_recognised_at_its_replica_local_path() -> None:
    """A replica lists the path it loaded from: a pushed copy's, not the bucket's."""
    registry = Registry()
    version = v(1)
    registry.add(version)
    registry.mark_loaded("r1", version, at="/tmp/store/trl-policy-v1/0123abcd")
    registry.observe("r1", {"trl-policy-v1": "/tmp/store/trl-policy-v1/0123abcd"})
    assert registry.plan("r1", manage_unknown=True) == []
    # Another copy at another path is not ours: it gets replaced.
    registry.observe("r1", {"trl-policy-v1": "/elsewhere"})
    assert registry.plan("r1", manage_unknown=True) == [Load(version, replace=True)]


def test_a_version_a_relay_pushed_is_the_bucket_version_at_its_mount_path() -> None:
    """A relay's upload names where the bucket mount shows the version: the watcher's later
    find of that directory is the same version, not another to load in place."""
    pushed = Version("trl-policy-v1", "/tmp/proxy-store/trl-policy-v1/ab", "client",
                     mount="/lora/run/.vllm_lora/trl-policy-v1")  # fmt: skip
    watched = Version("trl-policy-v1", "/lora/run/.vllm_lora/trl-policy-v1", "bucket",
                      (("adapter_model.safetensors", 10, 1),))  # fmt: skip
    assert pushed.where == watched.where == watched.path
    assert pushed.same_files(watched) and watched.same_files(pushed)
    registry = Registry()
    registry.add(pushed)
    registry.mark_loaded("r1", pushed, at="/replica/store/trl-policy-v1/cd")
    # The relay in front of this proxy sees the path it asked for listed.
    registry.observe("r1", {"trl-policy-v1": pushed.path})
    assert registry.plan("r1", manage_unknown=True) == []
