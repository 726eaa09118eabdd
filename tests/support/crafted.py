"""A replica that answers with crafted bytes: a raw asyncio server, for hostile-replica tests.

It answers the control plane as vLLM does (``/health``, ``/v1/models``, ``/server_info``) so
the proxy admits it, and answers every other request with the next answer of its script (a
list of byte pieces, written one after another). ``Crafted.closed`` counts connections it saw
closed by the proxy; ``requests`` records the request heads it read.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

MODEL = "crafted-model"
_MODELS = json.dumps(
    {"object": "list", "data": [{"id": MODEL, "object": "model", "max_model_len": 4096,
                                "parent": None, "root": MODEL}]}
).encode()  # fmt: skip
_INFO = json.dumps(
    {"vllm_config": {"lora_config": {"max_loras": 4, "max_lora_rank": 8},
                     "parallel_config": {"data_parallel_size": 1}}}
).encode()  # fmt: skip


def ok(body: bytes, content_type: bytes = b"application/json") -> bytes:
    return b"HTTP/1.1 200 OK\r\nContent-Type: %s\r\nContent-Length: %d\r\n\r\n%s" % (
        content_type,
        len(body),
        body,
    )


Script = Callable[[bytes], list[bytes]]  # request head -> answer pieces


@dataclass
class Crafted:
    url: str = ""
    requests: list[bytes] = field(default_factory=list)
    answered: int = 0
    connections: int = 0
    closed: int = 0


@asynccontextmanager
async def crafted(script: Script) -> AsyncIterator[Crafted]:
    state = Crafted()
    tasks: set[asyncio.Task[None]] = set()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        tasks.add(task)
        state.connections += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":", 1)[1])
                await reader.readexactly(length)
                target = head.split(b" ", 2)[1]
                if target == b"/health":
                    writer.write(ok(b""))
                elif target == b"/v1/models":
                    writer.write(ok(_MODELS))
                elif target.startswith(b"/server_info"):
                    writer.write(ok(_INFO))
                else:
                    state.requests.append(head)
                    for piece in script(head):
                        writer.write(piece)
                        await writer.drain()
                        await asyncio.sleep(0)
                    state.answered += 1
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            state.closed += 1
        except asyncio.CancelledError:
            pass  # the test is over
        finally:
            writer.close()
            tasks.discard(task)

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    state.url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    try:
        yield state
    finally:
        server.close()
        for task in list(tasks):
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
