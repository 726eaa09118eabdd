"""A raw asyncio HTTP server whose answers a test scripts byte for byte, on loopback.

It reads one request at a time (a head, then ``Content-Length`` bytes of body) and answers
request n (counted from 1) with ``script(n)``: byte pieces written one after another, each
drained, so a test chooses exactly where the answer is split. Framing, reuse and failure
handling are exercised on real sockets: split heads, chunk coding, stale keep-alives, answers
cut short, garbage, silence.

- ``close_after``: a connection is closed after that many answers on it (a keep-alive the
  server ends without saying so); ``drop``: request n's connection is closed unanswered.
- ``replica=True``: it also answers the control plane as vLLM does (``/health``,
  ``/v1/models``, ``/server_info``), so a proxy admits it; those requests are neither numbered
  nor recorded.
- ``requests``: each scripted request as received (head and body); ``connections``: how many
  were opened; ``closed_by_client``: how many the client closed (or reset) first;
  ``closed_by_server``: how many this server closed and saw closed.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

Script = Callable[[int], Sequence[bytes]]  # request number -> the pieces of the answer

MODEL = "crafted-model"  # what the server says it serves with ``replica=True``
_MODELS = json.dumps(
    {"object": "list", "data": [{"id": MODEL, "object": "model", "max_model_len": 4096,
                                "parent": None, "root": MODEL}]}
).encode()  # fmt: skip
_INFO = json.dumps(
    {"vllm_config": {"lora_config": {"max_loras": 4, "max_lora_rank": 8},
                     "parallel_config": {"data_parallel_size": 1}}}
).encode()  # fmt: skip


def ok(body: bytes, headers: bytes = b"Content-Type: application/json\r\n") -> bytes:
    """A whole 200 answer with ``body``; ``headers`` are the lines between its length and body."""
    return b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n%s\r\n%s" % (len(body), headers, body)


def _control_plane(target: bytes) -> bytes | None:
    if target == b"/health":
        return ok(b"")
    if target == b"/v1/models":
        return ok(_MODELS)
    if target.startswith(b"/server_info"):
        return ok(_INFO)
    return None


@dataclass
class Scripted:
    url: str = ""
    requests: list[bytes] = field(default_factory=list)
    connections: int = 0
    closed_by_client: int = 0
    closed_by_server: int = 0


@asynccontextmanager
async def scripted(
    script: Script,
    *,
    close_after: int | None = None,
    drop: frozenset[int] = frozenset(),
    replica: bool = False,
) -> AsyncIterator[Scripted]:
    state = Scripted()
    handlers: set[asyncio.Task[None]] = set()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        handlers.add(task)
        state.connections += 1
        answered = 0
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":", 1)[1])
                body = await reader.readexactly(length)
                control = _control_plane(head.split(b" ", 2)[1]) if replica else None
                if control is not None:
                    writer.write(control)
                    await writer.drain()
                    continue
                state.requests.append(head + body)
                if len(state.requests) in drop:
                    break
                for piece in script(len(state.requests)):
                    writer.write(piece)
                    await writer.drain()
                    await asyncio.sleep(0)
                answered += 1
                if close_after is not None and answered >= close_after:
                    break
            writer.close()
            await writer.wait_closed()
            state.closed_by_server += 1
        except (asyncio.IncompleteReadError, ConnectionError):
            state.closed_by_client += 1
        except asyncio.CancelledError:
            pass  # the test is over
        finally:
            writer.close()
            handlers.discard(task)

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    state.url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    try:
        yield state
    finally:
        server.close()
        for task in list(handlers):
            task.cancel()
        await asyncio.gather(*handlers, return_exceptions=True)
