"""A run's names on the replicas and their translation (``proxy.runs.names``), and the declared
runs (``proxy.runs.table``)."""

from __future__ import annotations

import asyncio

import orjson
import pytest

from proxy.routing.peek import peek_generation
from proxy.runs.names import (
    canonical,
    run_of,
    scoped,
    splice_model,
    unscope_text,
    unscoped,
)
from proxy.runs.run import DEFAULT
from proxy.runs.table import MAX_RUNS, RunPaused, Runs, UnknownRun, parse_runs


def _splice(body: bytes, new: str) -> bytes:
    peek = peek_generation(body, b"prompt")
    assert peek.model is not None
    found = splice_model(body, peek.model, new, (peek.start, peek.end))
    assert found is not None
    spliced, at, delta = found
    assert spliced[at : at + len(new) + 2] == orjson.dumps(new)
    assert delta == len(new) - len(peek.model)
    return spliced


def test_names_scope_and_unscope_both_ways() -> None:
    assert scoped("a", "trl-policy-v3") == "a.trl-policy-v3"
    assert unscoped("a", "a.trl-policy-v3") == "trl-policy-v3"
    assert unscoped("b", "a.trl-policy-v3") is None
    assert run_of("lr-3e5.trl-policy-v1") == "lr-3e5"
    assert run_of("trl-policy-v1") is None


@pytest.mark.parametrize(
    "body",
    [
        b'{"model":"trl-policy-v1","prompt":[1,2,3],"max_tokens":4}',
        b'{"prompt": [1, 2, 3], "max_tokens": 4, "model" : "trl-policy-v1"}',
        # The prompt itself names the model: only the top-level key is spliced.
        b'{"prompt":"\\"model\\":\\"trl-policy-v1\\"","model":"trl-policy-v1"}',
    ],
)
def test_the_model_is_spliced_in_the_bytes_and_nothing_else_changes(body: bytes) -> None:
    spliced = _splice(body, "a.trl-policy-v1")
    before, after = orjson.loads(body), orjson.loads(spliced)
    assert after["model"] == "a.trl-policy-v1"
    assert {**before, "model": "a.trl-policy-v1"} == after
    assert spliced.replace(b"a.trl-policy-v1", b"trl-policy-v1") == body


def test_an_ambiguous_body_is_left_to_the_canonical_rewrite() -> None:
    nested = b'{"model":"m","prompt":"p","extra":{"model":"m"}}'
    peek = peek_generation(nested, b"prompt")
    assert splice_model(nested, "m", "a.m", (peek.start, peek.end)) is None
    escaped = b'{"model":"\\u006d","prompt":"p"}'  # "m", written with an escape
    peek = peek_generation(escaped, b"prompt")
    assert splice_model(escaped, "m", "a.m", (peek.start, peek.end)) is None
    assert orjson.loads(canonical(nested, "a.m")) == {
        "model": "a.m",
        "prompt": "p",
        "extra": {"model": "m"},
    }


def test_adapter_names_and_answers_translate() -> None:
    assert scoped("a", "trl-policy-v2") == "a.trl-policy-v2"
    echoed = b"The model `a.trl-policy-v2` does not exist; data.a.trl stays"
    assert unscope_text(echoed, "a") == echoed.replace(b"`a.trl", b"`trl")
    assert unscope_text(b"'ba.trl-policy-v2'", "a") == b"'ba.trl-policy-v2'"
    stored = b'{"path": "/store/a.trl-policy-v2/0123"}'  # a real directory: kept
    assert unscope_text(stored, "a") == stored


def test_runs_parse_with_weights_and_bad_specs_name_what_is_wrong() -> None:
    assert parse_runs("a=2, b") == {"a": 2.0, "b": 1.0}
    for spec, words in [
        ("a.b", "run name 'a.b'"),
        ("a=x", "weight 'x' is not a number"),
        ("a=0", "weight must be > 0"),
        ("a,a", "declared twice"),
        (",".join(f"r{i}" for i in range(MAX_RUNS + 1)), f"at most {MAX_RUNS}"),
    ]:
        with pytest.raises(ValueError, match=words):
            parse_runs(spec)


def test_shares_of_max_loras_follow_the_weights() -> None:
    runs = Runs({"a": 1.0, "b": 2.0})
    assert (runs.share("a", 6), runs.share("b", 6)) == (2, 4)
    assert runs.share("a", 2) == 1  # never below one
    with pytest.raises(UnknownRun, match=r"runs: a, b"):
        runs.get("c")


async def test_a_paused_run_admits_after_resume_and_times_out_otherwise() -> None:
    run = Runs({"a": 1.0}).get("a")
    assert run.admission(0.0) is None  # an open gate: nothing to await
    run.pause()
    gate = run.admission(0.01)
    assert gate is not None
    with pytest.raises(RunPaused, match="run a stayed paused"):
        await gate
    gate = run.admission(30.0)
    assert gate is not None
    waiting = asyncio.ensure_future(gate)
    await asyncio.sleep(0)
    assert not waiting.done()
    run.resume()
    await waiting
    assert run.pauses == 1


def test_the_default_run_changes_nothing_and_a_declared_run_namespaces() -> None:
    """One handler path for both: what differs is each run's methods."""
    listing = {"data": [{"id": "base"}, {"id": "a.trl-policy-v1"}, {"id": "b.trl-policy-v1"}]}
    info = {"vllm_config": {"lora_config": {"max_loras": 6}}}
    assert DEFAULT.replica_name("x") == "x" and DEFAULT.target("/v1/models") == "/v1/models"
    assert DEFAULT.models(listing) is listing and DEFAULT.server_info(info) is info
    assert DEFAULT.admission(1.0) is None and DEFAULT.share(6) == 6
    assert DEFAULT.over_share(6, 6) is None  # its window trims instead
    a = Runs({"a": 1.0, "b": 2.0}).get("a")
    assert a.replica_name("x") == "a.x" and a.target("/runs/a/v1/models") == "/v1/models"
    assert [e["id"] for e in a.models(listing)["data"]] == ["base", "trl-policy-v1"]
    assert a.server_info(info)["vllm_config"]["lora_config"]["max_loras"] == 2
    assert info["vllm_config"]["lora_config"]["max_loras"] == 6  # the fleet's, untouched
    assert a.over_share(1, 6) is None and "share of max_loras is 2" in (a.over_share(2, 6) or "")


def test_each_runs_versions_keep_their_own_window_in_the_registry() -> None:
    from proxy.adapters.registry import Registry, Version

    # Runs a and b at weight 1 each: a share of 2 of max_loras 4; the proxy's own names: 4.
    registry = Registry(Runs({"a": 1.0, "b": 1.0}))
    registry.max_loras = 4

    def add(name: str) -> list[str]:
        return registry.add(Version(name, f"/x/{name}", "client"))

    assert add("a.trl-policy-v1") == [] and add("a.trl-policy-v2") == []
    assert add("b.trl-policy-v1") == []
    # Run a's third version retires a's oldest, never b's (b's v1 is older by number and time).
    assert add("a.trl-policy-v3") == ["a.trl-policy-v1"]
    for n in range(1, 5):
        assert add(f"trl-policy-v{n}") == []
    assert add("trl-policy-v5") == ["trl-policy-v1"]  # the bare path's window, as before
    assert set(registry.versions) == {
        "a.trl-policy-v2", "a.trl-policy-v3", "b.trl-policy-v1",
        "trl-policy-v2", "trl-policy-v3", "trl-policy-v4", "trl-policy-v5",
    }  # fmt: skip
