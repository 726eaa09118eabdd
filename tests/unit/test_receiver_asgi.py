"""The receiver as vLLM hosts it: ``replica_entry.receiver.AdapterReceiver``, driven as an ASGI
server would drive it (scope, receive, send), around a stand-in for vLLM's app."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from collections.abc import Awaitable, Callable, MutableMapping
from pathlib import Path
from typing import Any

import pytest

from adapter_receiver.receive import Limits
from adapter_receiver.store import MAX_ENTRIES
from adapter_receiver.wire import PREFIX
from replica_entry.receiver import (
    ENV_API_KEY,
    ENV_MAX_ADAPTER,
    ENV_MAX_STORE,
    ENV_STORE,
    AdapterReceiver,
    ReceiverConfig,
)
from tests.support.uploads import upload_body

Message = MutableMapping[str, Any]
FILES = {"adapter_config.json": b'{"r": 1}', "adapter_model.safetensors": b"\1" * 5000}


class Vllm:
    """Stands for vLLM's app: reads the whole body, answers ``status``, remembers each call."""

    def __init__(self, status: int = 200) -> None:
        self.status = status
        self.calls: list[tuple[MutableMapping[str, Any], Any, bytes]] = []

    async def __call__(
        self,
        scope: MutableMapping[str, Any],
        receive: Callable[[], Awaitable[Message]],
        send: Callable[[Message], Awaitable[None]],
    ) -> None:
        body, more = b"", scope["type"] == "http"
        while more:
            message = await receive()
            body += message.get("body", b"")
            more = message.get("more_body", False)
        self.calls.append((scope, receive, body))
        if scope["type"] == "http":
            await send({"type": "http.response.start", "status": self.status, "headers": []})
            await send({"type": "http.response.body", "body": b"vllm"})


def _scope(method: str, path: str, headers: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "type": "http",
        "method": method,
        "path": path,
        "root_path": "",
        "headers": [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()],
    }


async def _call(
    app: AdapterReceiver, scope: dict[str, Any], chunks: list[bytes], *, disconnect: bool = False
) -> tuple[int, bytes]:
    messages: list[Message] = [
        {"type": "http.request", "body": c, "more_body": i < len(chunks) - 1 or disconnect}
        for i, c in enumerate(chunks or [b""])
    ]
    if disconnect:
        messages.append({"type": "http.disconnect"})
    sent: list[Message] = []

    async def receive() -> Message:
        return messages.pop(0) if messages else {"type": "http.disconnect"}

    async def send(message: Message) -> None:
        sent.append(message)

    await app(scope, receive, send)
    start = next(m for m in sent if m["type"] == "http.response.start")
    return start["status"], b"".join(m.get("body", b"") for m in sent[1:])


def _receiver(tmp_path: Path, inner: Vllm, **env: str) -> AdapterReceiver:
    return AdapterReceiver(inner, {ENV_STORE: str(tmp_path / "store"), **env})


def _upload(name: str, files: dict[str, bytes] = FILES) -> tuple[dict[str, Any], list[bytes]]:
    body = upload_body(files)
    scope = _scope("PUT", f"{PREFIX}/{name}", {"Content-Length": str(len(body))})
    return scope, [body[i : i + 1000] for i in range(0, len(body), 1000)]


async def test_every_other_request_reaches_vllm_as_it_came(tmp_path: Path) -> None:
    inner = Vllm()
    app = _receiver(tmp_path, inner)
    scope = _scope("POST", "/v1/completions")
    messages = [{"type": "http.request", "body": b'{"prompt": [1]}', "more_body": False}]

    async def receive() -> Message:
        return messages.pop(0)

    async def send(message: Message) -> None:
        pass

    await app(scope, receive, send)
    assert inner.calls[0][0] is scope and inner.calls[0][1] is receive
    lifespan = {"type": "lifespan"}
    await app(lifespan, receive, send)
    assert inner.calls[1][0] is lifespan


async def test_an_upload_in_pieces_is_published_and_listed(tmp_path: Path) -> None:
    inner = Vllm()
    app = _receiver(tmp_path, inner)
    status, raw = await _call(app, *_upload("trl-policy-v1"))
    assert status == 201, raw
    entry = json.loads(raw)
    assert Path(entry["path"]).parent.parent == (tmp_path / "store").resolve()
    assert (Path(entry["path"]) / "adapter_model.safetensors").read_bytes() == FILES[
        "adapter_model.safetensors"
    ]
    status, raw = await _call(app, _scope("GET", PREFIX), [])
    assert status == 200
    assert [e["name"] for e in json.loads(raw)["adapters"]] == ["trl-policy-v1"]
    assert not inner.calls  # vLLM never saw the receiver's routes


async def test_a_sender_gone_mid_body_leaves_nothing(tmp_path: Path) -> None:
    app = _receiver(tmp_path, Vllm())
    scope, chunks = _upload("trl-policy-v1")
    await _call(app, scope, chunks[:3], disconnect=True)
    assert list((tmp_path / "store" / ".tmp").iterdir()) == []
    assert not (tmp_path / "store" / "trl-policy-v1").exists()


@pytest.mark.parametrize(
    ("status", "dropped"), [(200, True), (404, True), (401, False), (500, False)]
)
async def test_an_unload_vllm_answers_200_or_404_drops_the_copies(
    tmp_path: Path, status: int, dropped: bool
) -> None:
    inner = Vllm(status)
    app = _receiver(tmp_path, inner)
    await _call(app, *_upload("trl-policy-v1"))
    body = json.dumps({"lora_name": "trl-policy-v1"}).encode()
    answer = await _call(app, _scope("POST", "/v1/unload_lora_adapter"), [body[:5], body[5:]])
    assert answer == (status, b"vllm")
    assert inner.calls[0][2] == body  # vLLM got the body as it was sent
    assert (tmp_path / "store" / "trl-policy-v1").exists() is not dropped


async def test_a_large_unload_body_passes_through_whole_and_drops_nothing(tmp_path: Path) -> None:
    inner = Vllm(200)
    app = _receiver(tmp_path, inner)
    await _call(app, *_upload("trl-policy-v1"))
    body = json.dumps({"lora_name": "trl-policy-v1", "pad": "x" * 100_000}).encode()
    chunks = [body[i : i + 4096] for i in range(0, len(body), 4096)]
    await _call(app, _scope("POST", "/v1/unload_lora_adapter"), chunks)
    assert inner.calls[0][2] == body
    assert (tmp_path / "store" / "trl-policy-v1").exists()


async def test_the_api_key_guards_the_receiver(tmp_path: Path) -> None:
    app = _receiver(tmp_path, Vllm(), **{ENV_API_KEY: "k3y"})
    scope, chunks = _upload("trl-policy-v1")
    assert (await _call(app, scope, chunks))[0] == 401
    scope["headers"].append((b"authorization", b"Bearer k3y"))
    assert (await _call(app, scope, chunks))[0] == 201
    assert (await _call(app, _scope("GET", PREFIX), []))[0] == 401


async def test_other_methods_are_refused(tmp_path: Path) -> None:
    app = _receiver(tmp_path, Vllm())
    assert (await _call(app, _scope("DELETE", f"{PREFIX}/x"), []))[0] == 405
    assert (await _call(app, _scope("PUT", PREFIX), []))[0] == 405


def test_the_store_is_emptied_when_the_receiver_is_built(tmp_path: Path) -> None:
    store = tmp_path / "store"
    (store / "trl-policy-v3" / "abc").mkdir(parents=True)
    _receiver(tmp_path, Vllm())
    assert sorted(p.name for p in store.iterdir()) == [".lock", ".tmp", ".usage"]


@pytest.mark.parametrize(
    ("variable", "value"), [(ENV_MAX_ADAPTER, "lots"), (ENV_MAX_STORE, "0"), (ENV_MAX_STORE, "-5")]
)
def test_bad_settings_stop_the_server_naming_the_variable(variable: str, value: str) -> None:
    with pytest.raises(ValueError, match=variable.replace("$", r"\$")):
        ReceiverConfig.from_env({variable: value})


def test_defaults() -> None:
    config = ReceiverConfig.from_env({})
    assert (config.max_adapter_bytes, config.max_store_bytes) == (1 << 30, 8 << 30)
    assert config.api_key is None
    assert config.store.is_dir() and config.store.name.startswith("rollout-adapters-")
    config.store.rmdir()
    # SECURITY.md's receiver bounds: 8 uploads, 30 s idle, 1 MiB buffered, 60 s + 1 s a MiB.
    limits = Limits()
    assert (limits.max_uploads, limits.idle_timeout_s, limits.chunk_bytes) == (8, 30, 1 << 20)
    assert limits.deadline_s(10 << 20) == 70
    assert MAX_ENTRIES == 1024


def test_vllm_can_import_it_with_the_standard_library_alone() -> None:
    """A replica image has vLLM's packages, not ours: the middleware must not need them."""
    code = (
        "import sys, replica_entry.receiver\n"
        "ours = {'aiohttp', 'pydantic', 'orjson', 'prometheus_client', 'huggingface_hub',"
        " 'uvloop', 'xxhash', 'httptools', 'pydantic_settings'}\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ours))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.strip() == "[]"


def test_digests_match_hashlib() -> None:
    body = upload_body({"a": b"xyz"})
    assert body.endswith(b"xyz" + hashlib.sha256(b"xyz").hexdigest().encode())
