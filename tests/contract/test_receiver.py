"""The adapter receiver (``adapter_receiver.wire``'s routes) on a replica: the simulated one, and
real vLLM with ``replica_entry``'s middleware (the e2e tier runs this suite against it).

What a sender can and cannot make it do: a complete, checked upload is published atomically and
loadable from its path; anything else (unsafe names, oversize, a damaged or short body, a sender
that hangs up) publishes nothing and gives back the space it reserved; copies go when their name
is unloaded."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from adapter_receiver.wire import MANIFEST_LIMIT, MAX_FILES, PREFIX
from tests.contract.support import EXTERNAL_URL, Replica
from tests.support.fleet import SimServer
from tests.support.uploads import adapter_files, listing, manifest_line, put, raw_put, upload_body
from tests.support.waiting import eventually

KEY = os.environ.get("CONTRACT_REPLICA_API_KEY") if EXTERNAL_URL else None
AUTH = {"Authorization": f"Bearer {KEY}"} if KEY else {}


def _names(store: dict[str, Any], name: str) -> list[dict[str, Any]]:
    return [e for e in store["adapters"] if e["name"] == name]


def _on_disk(entry: dict[str, Any]) -> dict[str, bytes]:
    """The adapter files of a published entry (the replica runs on this machine)."""
    path = Path(entry["path"])
    return {p.name: p.read_bytes() for p in path.iterdir() if not p.name.startswith(".")}


async def _roots(replica: Replica) -> dict[str, str]:
    status, raw = await replica.get("/v1/models")
    assert status == 200
    return {card["id"]: card["root"] for card in json.loads(raw)["data"][1:]}


async def test_an_upload_is_published_loaded_from_its_path_and_dropped_on_unload(
    replica: Replica,
) -> None:
    source = replica.make_adapter()
    files = adapter_files(source)
    name = replica.unique("pushed")
    status, entry = await put(replica.session, replica.url, name, upload_body(files, str(source)))
    assert status == 201, entry
    assert (entry["name"], entry["origin"]) == (name, str(source))
    assert {f["name"]: f["size"] for f in entry["files"]} == {n: len(b) for n, b in files.items()}
    assert _on_disk(entry) == files
    assert _names(await listing(replica.session, replica.url), name) == [entry]

    status, raw = await replica.load(name, Path(entry["path"]))
    assert status == 200, raw
    assert (await _roots(replica))[name] == entry["path"]
    status, raw = await replica.unload(name)
    assert status == 200, raw
    await eventually(lambda: _gone(replica, name), what="the stored copy deleted after the unload")
    assert not await asyncio.to_thread(Path(entry["path"]).exists)


async def _gone(replica: Replica, name: str) -> bool:
    return not _names(await listing(replica.session, replica.url), name)


async def test_the_same_bytes_twice_are_one_entry_and_an_unload_of_a_name_never_loaded_drops_it(
    replica: Replica,
) -> None:
    files = adapter_files(replica.make_adapter())
    name = replica.unique("twice")
    first = await put(replica.session, replica.url, name, upload_body(files))
    second = await put(replica.session, replica.url, name, upload_body(files))
    assert (first[0], second[0]) == (201, 200)
    assert first[1]["path"] == second[1]["path"]
    assert len(_names(await listing(replica.session, replica.url), name)) == 1
    status, _ = await replica.unload(name)  # vLLM: 404, the name was never loaded
    assert status == 404
    await eventually(lambda: _gone(replica, name), what="the copy of a name not loaded deleted")


async def test_concurrent_uploads_of_one_name_publish_whole_entries_only(replica: Replica) -> None:
    base = adapter_files(replica.make_adapter())
    other = {**base, "README.md": b"another version of the same name\n" * 1000}
    name = replica.unique("raced")
    bodies = [upload_body(base), upload_body(other)] * 2
    answers = await asyncio.gather(*(put(replica.session, replica.url, name, b) for b in bodies))
    assert sorted(status for status, _ in answers) == [200, 200, 201, 201], answers
    entries = _names(await listing(replica.session, replica.url), name)
    contents = sorted(sorted(_on_disk(e).items()) for e in entries)
    assert contents == sorted([sorted(base.items()), sorted(other.items())])
    await replica.unload(name)
    await eventually(lambda: _gone(replica, name), what="both entries dropped")


@pytest.mark.parametrize("file_name", ["../escaped", ".hidden", "a/b", "", "x" * 200, "é"])
async def test_unsafe_file_names_are_refused_and_nothing_is_written(
    replica: Replica, file_name: str
) -> None:
    name = replica.unique("unsafe")
    status, answer = await put(
        replica.session, replica.url, name, upload_body({file_name: b"payload"})
    )
    assert status == 400, answer
    assert "file name" in answer["error"]["message"]
    assert not _names(await listing(replica.session, replica.url), name)


@pytest.mark.parametrize(
    "target", ["..", "%2E%2E", "a%2Fb", ".tmp", "-x", "a b", "a..b", "%2E%2E%2Fx", "x" * 200]
)
async def test_unsafe_adapter_names_are_refused(replica: Replica, target: str) -> None:
    before = await listing(replica.session, replica.url)
    body = upload_body({"adapter_config.json": b"{}"})
    # The name is refused before any body byte is read: none is sent (a server that closes a
    # connection with unread bytes resets it, which can lose the answer on the way).
    answer = await raw_put(replica.url, f"{PREFIX}/{target}", [], length=len(body), headers=AUTH)
    assert answer is not None and 400 <= answer[0] < 500, answer
    assert (await listing(replica.session, replica.url))["adapters"] == before["adapters"]


@pytest.mark.parametrize("line", [b"[" * 60000, b'{"a":' * 12000])
async def test_a_manifest_nested_past_the_stack_is_refused_not_a_crash(
    replica: Replica, line: bytes
) -> None:
    body = line + b"\n"
    answer = await raw_put(
        replica.url, f"{PREFIX}/{replica.unique('deep')}", [body], length=len(body), headers=AUTH
    )
    assert answer is not None and answer[0] == 400, answer
    status, _ = await replica.get("/health")
    assert status == 200  # and the replica serves on


@pytest.mark.parametrize(
    "line",
    [
        manifest_line({}),  # no file
        manifest_line({f"f{i}.bin": 1 for i in range(MAX_FILES + 1)}),  # one file too many
        b'{"format": "' + b"x" * MANIFEST_LIMIT + b'"}',  # a line over the limit
    ],
    ids=["no-file", "too-many-files", "line-too-long"],
)
async def test_a_manifest_outside_its_limits_is_refused(replica: Replica, line: bytes) -> None:
    body = line + b"\n"
    answer = await raw_put(
        replica.url, f"{PREFIX}/{replica.unique('limits')}", [body], length=len(body), headers=AUTH
    )
    assert answer is not None and answer[0] == 400, answer
    store = await listing(replica.session, replica.url, **AUTH)
    assert not any(entry["name"].startswith("limits") for entry in store["adapters"])


async def test_an_adapter_over_the_cap_is_refused_from_its_manifest(replica: Replica) -> None:
    cap = (await listing(replica.session, replica.url))["max_adapter_bytes"]
    line = manifest_line({"adapter_config.json": 10, "adapter_model.safetensors": cap})
    length = len(line) + cap + 10 + 128
    # Only the manifest is sent: the answer comes without the rest of the body.
    answer = await raw_put(
        replica.url, f"{PREFIX}/{replica.unique('huge')}", [line], length=length, headers=AUTH
    )
    assert answer is not None and answer[0] == 413, answer


async def test_a_checksum_mismatch_publishes_nothing(replica: Replica) -> None:
    files = adapter_files(replica.make_adapter())
    name = replica.unique("damaged")
    before = (await listing(replica.session, replica.url))["bytes"]
    body = upload_body(files, digests={"adapter_config.json": "0" * 64})
    status, answer = await put(replica.session, replica.url, name, body)
    assert status == 400
    assert "sha256 mismatch" in answer["error"]["message"]
    store = await listing(replica.session, replica.url)
    assert not _names(store, name)
    assert store["bytes"] == before


@pytest.mark.parametrize("delta", [-1, 1])
async def test_a_length_other_than_the_manifests_is_refused(replica: Replica, delta: int) -> None:
    files = {"adapter_config.json": b"{}", "adapter_model.safetensors": b"\0" * 64}
    body = upload_body(files) + b"x"
    answer = await raw_put(
        replica.url,
        f"{PREFIX}/{replica.unique('length')}",
        [body[: len(body) - 1 + delta]],
        length=len(body) - 1 + delta,
        headers=AUTH,
    )
    assert answer is not None and answer[0] == 400, answer


async def test_an_upload_without_a_length_is_refused(replica: Replica) -> None:
    answer = await raw_put(
        replica.url, f"{PREFIX}/{replica.unique('nolength')}", [], length=None, headers=AUTH
    )
    assert answer is not None and answer[0] in (400, 411), answer


async def test_an_interrupted_upload_publishes_nothing_and_frees_its_space(
    replica: Replica,
) -> None:
    files = {"adapter_config.json": b"{}", "adapter_model.safetensors": os.urandom(1 << 20)}
    body = upload_body(files)
    name = replica.unique("cut")
    before = (await listing(replica.session, replica.url))["bytes"]
    await raw_put(
        replica.url, f"{PREFIX}/{name}", [body[: len(body) // 2]], length=len(body),
        headers=AUTH, hang_up=True,
    )  # fmt: skip

    async def released() -> bool:
        store = await listing(replica.session, replica.url)
        return not _names(store, name) and store["bytes"] == before

    await eventually(released, timeout=30, what="the partial upload discarded")


@pytest.fixture
async def keyed(sim_server: SimServer, replica: Replica) -> AsyncIterator[tuple[str, str]]:
    """A replica with an API key, and the key: real vLLM's (when it has one) or a sim's."""
    if EXTERNAL_URL is not None:
        if KEY is None:
            pytest.skip("the external replica has no API key (CONTRACT_REPLICA_API_KEY)")
        yield replica.url, KEY
        return
    async with sim_server(api_key="receiver-key") as (url, _):
        yield url, "receiver-key"


@pytest.mark.parametrize("header", [None, "Bearer wrong", "receiver-key", "Basic x"])
async def test_the_receiver_demands_the_replicas_api_key(
    keyed: tuple[str, str], header: str | None
) -> None:
    url, key = keyed
    headers = {} if header is None else {"Authorization": header.replace("receiver-key", key)}
    body = upload_body({"adapter_config.json": b"{}"})
    async with aiohttp.ClientSession() as bare:
        async with bare.get(url + PREFIX, headers=headers) as response:
            assert response.status == 401
        status, _ = await put(bare, url, "auth-test", body, **headers)
        assert status == 401
        status, _ = await put(bare, url, "auth-test", body, Authorization=f"Bearer {key}")
        assert status in (200, 201)
        async with bare.post(
            url + "/v1/unload_lora_adapter",
            json={"lora_name": "auth-test"},
            headers={"Authorization": f"Bearer {key}"},
        ) as response:
            assert response.status == 404
