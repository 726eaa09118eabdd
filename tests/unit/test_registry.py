"""The adapter-version registry (desired state) and what one replica holds (its status,
``ReplicaStatus``): window, plans, stale copies, leftovers, pushed copies."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxy.adapters.registry import Load, Registry, Unload, Version
from proxy.adapters.status import Copy, ReplicaStatus
from proxy.fleet.replica import Replica
from proxy.runs.table import Runs


def v(
    n: int, path: str | None = None, files: tuple[tuple[str, int, int], ...] | None = None
) -> Version:
    return Version(f"trl-policy-v{n}", path or f"/lora/run/.vllm_lora/trl-policy-v{n}", "client",
                   files)  # fmt: skip


def record() -> ReplicaStatus:
    return ReplicaStatus(Replica("127.0.0.1:8001", "http://127.0.0.1:8001"), lambda status: None)


def registry(max_loras: int | None = None, window: int | None = None) -> Registry:
    made = Registry(Runs(), window_override=window)
    made.max_loras = max_loras
    return made


def test_window_follows_max_loras_and_drops_the_oldest() -> None:
    wanted = registry(max_loras=3)
    assert wanted.window == 3
    dropped = [name for n in range(1, 6) for name in wanted.add(v(n))]
    assert dropped == ["trl-policy-v1", "trl-policy-v2"]
    assert list(wanted.versions) == ["trl-policy-v3", "trl-policy-v4", "trl-policy-v5"]
    assert wanted.newest() == 5


@pytest.mark.parametrize("staleness", [0, 1, 2])
def test_the_window_keeps_every_version_trl_may_still_ask_for(staleness: int) -> None:
    """TRL at its smallest ``max_loras`` (``max_staleness + 2``): it holds ``staleness + 1``
    versions, loads the next one, and only then unloads the oldest; until that load answers its
    rollouts may still ask for the oldest, so the load must not retire it."""
    wanted = registry(max_loras=staleness + 2)
    for n in range(1, staleness + 2):
        assert wanted.add(v(n)) == []
    for n in range(staleness + 2, staleness + 8):
        oldest = f"trl-policy-v{n - 1 - staleness}"
        assert wanted.add(v(n)) == []
        assert wanted.wanted(oldest) is not None
        wanted.remove(oldest)  # TRL's unload, after its load answered


def carry_out(wanted: Registry, held: ReplicaStatus, *, manage_unknown: bool = False) -> None:
    """What an agent does with a plan (every command answered 200)."""
    for command in wanted.plan(held, manage_unknown=manage_unknown):
        if isinstance(command, Load):
            held.confirm(command.version, command.version.where, pushed=False)
        else:
            held.drop(command.name)


def test_plan_loads_the_window_in_version_order() -> None:
    wanted, held = registry(window=3), record()
    for n in (3, 1, 2):
        wanted.add(v(n))
    assert wanted.plan(held, manage_unknown=False) == [Load(v(1)), Load(v(2)), Load(v(3))]
    carry_out(wanted, held)
    assert wanted.plan(held, manage_unknown=False) == []


def test_dropped_versions_are_unloaded_and_never_planned_again() -> None:
    wanted, held = registry(window=2), record()
    for n in (1, 2):
        wanted.add(v(n))
    carry_out(wanted, held)
    wanted.add(v(3))
    assert wanted.plan(held, manage_unknown=False) == [Unload("trl-policy-v1"), Load(v(3))]


def test_unloads_come_first_and_loads_only_when_asked() -> None:
    wanted, held = registry(window=2), record()
    for n in (1, 2):
        wanted.add(v(n))
    carry_out(wanted, held)
    wanted.add(v(3))
    assert wanted.plan(held, manage_unknown=False, loads=False) == [Unload("trl-policy-v1")]


def test_stale_copy_under_the_same_name_is_replaced() -> None:
    wanted, held = registry(), record()
    old = v(1, files=(("adapter_model.safetensors", 10, 1),))
    new = v(1, files=(("adapter_model.safetensors", 10, 2),))
    held.confirm(old, old.where, pushed=False)
    wanted.add(new)
    assert wanted.plan(held, manage_unknown=False) == [Load(new, replace=True)]


def test_adapters_loaded_before_the_proxy_knew_them() -> None:
    wanted, held = registry(), record()
    held.observe({"trl-policy-v1": "/lora/x", "leftover": "/old/run"})
    wanted.add(v(1, path="/lora/x"))
    # The wanted name is reloaded (its files cannot be vouched for); leftovers stay unless a
    # source is configured, or TRL unloads them by name.
    assert wanted.plan(held, manage_unknown=False) == [Load(v(1, "/lora/x"), replace=True)]
    assert Unload("leftover") in wanted.plan(held, manage_unknown=True)
    wanted.remove("leftover")
    assert Unload("leftover") in wanted.plan(held, manage_unknown=False)


@given(st.lists(st.integers(1, 40), min_size=1, max_size=60), st.integers(1, 8))
def test_never_more_than_max_loras_planned(numbers: list[int], max_loras: int) -> None:
    wanted, held = registry(max_loras=max_loras), record()
    for n in numbers:
        wanted.add(v(n))
        carry_out(wanted, held)
        assert len(held.paths) <= max_loras
    assert max(numbers) == wanted.newest()


def test_a_pushed_copy_is_recognised_at_its_replica_local_path() -> None:
    """A replica lists the path it loaded from: a pushed copy's, not the bucket's."""
    wanted, held = registry(), record()
    version = v(1)
    wanted.add(version)
    held.confirm(version, "/tmp/store/trl-policy-v1/0123abcd", pushed=True)
    held.observe({"trl-policy-v1": "/tmp/store/trl-policy-v1/0123abcd"})
    assert wanted.plan(held, manage_unknown=True) == []
    # Another copy at another path is not ours: it gets replaced.
    held.observe({"trl-policy-v1": "/elsewhere"})
    assert wanted.plan(held, manage_unknown=True) == [Load(version, replace=True)]


def test_a_pushed_copy_never_loaded_is_unloaded_so_its_receiver_drops_it() -> None:
    wanted, held = registry(), record()
    held.pushed("trl-policy-v1")  # the bytes landed; vLLM refused the load
    assert wanted.plan(held, manage_unknown=False) == [Unload("trl-policy-v1")]


def test_a_copy_a_previous_proxy_loaded_is_not_reloaded_after_its_restart() -> None:
    """The state file remembers where each version was loaded from on each replica: a pushed
    copy listed at that path is that version, not a copy of unknown files to replace."""
    wanted, held = registry(), record()
    version = v(1)
    wanted.add(version)
    held.remember({"trl-policy-v1": Copy(version, "/replica/store/trl-policy-v1/ab")})
    held.observe({"trl-policy-v1": "/replica/store/trl-policy-v1/ab"})
    assert wanted.plan(held, manage_unknown=True) == []
    fresh = record()  # without the memory the same listing is a copy of unknown files
    fresh.observe({"trl-policy-v1": "/replica/store/trl-policy-v1/ab"})
    assert wanted.plan(fresh, manage_unknown=True) == [Load(version, replace=True)]


def test_a_version_a_relay_pushed_is_the_bucket_version_at_its_mount_path() -> None:
    """A relay's upload names where the bucket mount shows the version: the watcher's later
    find of that directory is the same version, not another to load in place."""
    pushed = Version("trl-policy-v1", "/tmp/proxy-store/trl-policy-v1/ab", "client",
                     mount="/lora/run/.vllm_lora/trl-policy-v1")  # fmt: skip
    watched = Version("trl-policy-v1", "/lora/run/.vllm_lora/trl-policy-v1", "bucket",
                      (("adapter_model.safetensors", 10, 1),))  # fmt: skip
    assert pushed.where == watched.where == watched.path
    assert pushed.same_files(watched) and watched.same_files(pushed)
    wanted, held = registry(), record()
    wanted.add(pushed)
    held.confirm(pushed, "/replica/store/trl-policy-v1/cd", pushed=True)
    # The relay in front of this proxy sees the path it asked for listed.
    held.observe({"trl-policy-v1": pushed.path})
    assert wanted.plan(held, manage_unknown=True) == []


def test_a_version_whose_load_is_under_way_is_not_dropped_until_it_ends() -> None:
    wanted = registry(window=2)
    wanted.add(v(1))
    wanted.add(v(2))
    assert wanted.add(v(3), pinned={"trl-policy-v1"}) == []  # over the window for now
    assert wanted.trim("trl-policy-v1") == ["trl-policy-v1"]  # its load ended
    assert list(wanted.versions) == ["trl-policy-v2", "trl-policy-v3"]
