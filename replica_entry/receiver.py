"""The adapter receiver inside vLLM's own API server: pure ASGI middleware.

``replica_entry --backend vllm`` starts vLLM with ``--middleware
replica_entry.receiver.AdapterReceiver``. vLLM (0.32, ``entrypoints/serve/middleware/register.py``)
imports that path in each API-server process and calls ``app.add_middleware(AdapterReceiver)``
with no arguments, after its own middleware, so this one is outermost: it sees every request
first, answers the routes under ``adapter_receiver.wire.PREFIX`` itself and hands everything else
to vLLM untouched (one path comparison per request; no ``BaseHTTPMiddleware``, which would
buffer every generation answer). No extra port, no extra hop.

Configured from the environment (replica_entry sets it; the values are read once, at start):
``ROLLOUT_ADAPTER_STORE`` (the store directory; default a fresh temporary one),
``ROLLOUT_ADAPTER_MAX_BYTES`` (per adapter, default 1 GiB), ``ROLLOUT_ADAPTER_STORE_MAX_BYTES``
(the whole store, default 8 GiB) and ``VLLM_API_KEY``: vLLM's own key check covers only ``/v1``
and a few other prefixes and runs inside this middleware, so the receiver checks the key itself
(constant time) on its routes when one is set.

The store is emptied when the middleware is built, i.e. when the replica starts (vLLM runs one
API-server process when runtime LoRA updating is on; the state lives on disk regardless). A stored
copy is deleted after vLLM answers an unload of its name with 200 or 404 (the name is not loaded
there any more, so vLLM cannot reload from that path): the receiver watches
``/v1/unload_lora_adapter`` go through (body at most ``UNLOAD_BODY_LIMIT`` bytes, replayed to
vLLM as it came). Imports only the standard library and ``adapter_receiver`` (which does too).
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, MutableMapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from adapter_receiver.receive import Answer, ClientGone, Limits, Receiver, authorized, refusal
from adapter_receiver.store import Store
from adapter_receiver.wire import PREFIX

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]

ENV_STORE = "ROLLOUT_ADAPTER_STORE"
ENV_MAX_ADAPTER = "ROLLOUT_ADAPTER_MAX_BYTES"
ENV_MAX_STORE = "ROLLOUT_ADAPTER_STORE_MAX_BYTES"
ENV_API_KEY = "VLLM_API_KEY"
DEFAULT_MAX_ADAPTER = 1 << 30
DEFAULT_MAX_STORE = 8 << 30
UNLOAD_PATH = "/v1/unload_lora_adapter"
UNLOAD_BODY_LIMIT = 64 * 1024


@dataclass(frozen=True)
class ReceiverConfig:
    store: Path
    max_adapter_bytes: int
    max_store_bytes: int
    api_key: str | None

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> ReceiverConfig:
        """Read and check the variables; ValueError naming the variable when one is bad."""
        store = environ.get(ENV_STORE) or tempfile.mkdtemp(prefix="rollout-adapters-")
        return cls(
            store=Path(store),
            max_adapter_bytes=_positive(environ, ENV_MAX_ADAPTER, DEFAULT_MAX_ADAPTER),
            max_store_bytes=_positive(environ, ENV_MAX_STORE, DEFAULT_MAX_STORE),
            api_key=environ.get(ENV_API_KEY) or None,
        )


def _positive(environ: Mapping[str, str], name: str, default: int) -> int:
    text = environ.get(name)
    if not text:
        return default
    try:
        value = int(text)
    except ValueError:
        raise ValueError(f"${name} must be a whole number of bytes (got {text!r})") from None
    if value <= 0:
        raise ValueError(f"${name} must be positive (got {value})")
    return value


class AdapterReceiver:
    """ASGI middleware: the receiver's routes, and garbage collection on unload."""

    def __init__(self, app: App, environ: Mapping[str, str] | None = None) -> None:
        self.app = app
        config = ReceiverConfig.from_env(os.environ if environ is None else environ)
        store = Store(config.store, config.max_store_bytes)
        store.reset()
        self.receiver = Receiver(store, Limits(max_adapter_bytes=config.max_adapter_bytes))
        self._key = config.api_key

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            path = scope["path"].removeprefix(scope.get("root_path", ""))
            if path == PREFIX or path.startswith(PREFIX + "/"):
                await self._ours(path, scope, receive, send)
                return
            if path == UNLOAD_PATH and scope.get("method") == "POST":
                await self._unload(scope, receive, send)
                return
        await self.app(scope, receive, send)

    async def _ours(self, path: str, scope: Scope, receive: Receive, send: Send) -> None:
        headers = _headers(scope)
        method = scope.get("method", "GET")
        if not authorized(headers.get("authorization"), self._key):
            await _send(send, Answer(401, {"error": "Unauthorized"}))
            return
        name = path[len(PREFIX) :].strip("/")
        if not name and method == "GET":
            answer = await self.receiver.listing()
        elif name and method == "PUT":
            answer = await self.receiver.upload(name, _length(headers), _chunks(receive))
        else:
            answer = refusal(405, f"{method} is not allowed here (GET {PREFIX}, PUT {PREFIX}/NAME)")
        await _send(send, answer)

    async def _unload(self, scope: Scope, receive: Receive, send: Send) -> None:
        body, more = b"", True
        while more and len(body) <= UNLOAD_BODY_LIMIT:
            message = await receive()
            if message["type"] != "http.request":
                await self.app(scope, _replay([message], receive), send)
                return
            body += message.get("body", b"")
            more = bool(message.get("more_body", False))
        replay: list[Message] = [{"type": "http.request", "body": body, "more_body": more}]
        status = 0

        async def watch(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        await self.app(scope, _replay(replay, receive), watch)
        name = _lora_name(body) if not more else None
        if name is not None and status in (200, 404):
            await self.receiver.unloaded(name)


def _replay(messages: list[Message], receive: Receive) -> Receive:
    async def replayed() -> Message:
        return messages.pop(0) if messages else await receive()

    return replayed


def _lora_name(body: bytes) -> str | None:
    try:
        data = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return None
    name = data.get("lora_name") if isinstance(data, dict) else None
    return name if isinstance(name, str) else None


def _headers(scope: Scope) -> dict[str, str]:
    return {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", ())}


def _length(headers: dict[str, str]) -> int | None:
    text = headers.get("content-length")
    return int(text) if text is not None and text.isdigit() else None


async def _chunks(receive: Receive) -> AsyncIterator[bytes]:
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientGone
        body = message.get("body", b"")
        if body:
            yield body
        if not message.get("more_body", False):
            return


async def _send(send: Send, answer: Answer) -> None:
    data = json.dumps(answer.body).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(data))]
    if answer.status == 401:
        headers.append((b"www-authenticate", b"Bearer"))
    await send({"type": "http.response.start", "status": answer.status, "headers": headers})
    await send({"type": "http.response.body", "body": data})
