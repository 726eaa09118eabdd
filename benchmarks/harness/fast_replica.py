"""A minimal, fast vLLM stand-in for the overhead suite: cheaper than the proxy it measures.

A raw asyncio protocol (on uvloop) that speaks just enough HTTP/1.1 keep-alive: ``/health``,
``/v1/models`` and ``/server_info`` answered like vLLM, and ``POST /v1/completions`` answered with
a fixed TRL-shaped completion after an optional delay. No JSON parsing, no framework.

    python -m benchmarks.harness.fast_replica --port 9201 [--delay-s 0.02]
"""

from __future__ import annotations

import argparse
import asyncio
import signal
from typing import cast

import orjson

_COMPLETION = orjson.dumps(
    {
        "id": "cmpl-bench",
        "object": "text_completion",
        "created": 0,
        "model": "bench-model",
        "choices": [
            {
                "index": 0,
                "text": " x" * 16,
                "token_ids": list(range(100, 116)),
                "logprobs": {"token_logprobs": [-0.5] * 16},
                "finish_reason": "length",
            }
        ],
        "usage": {
            "prompt_tokens": 600,
            "completion_tokens": 16,
            "total_tokens": 616,
            "prompt_tokens_details": {"cached_tokens": 0},
        },
    }
)
_MODELS = orjson.dumps(
    {
        "object": "list",
        "data": [
            {
                "id": "bench-model",
                "object": "model",
                "root": "bench-model",
                "parent": None,
                "max_model_len": 8192,
            }
        ],
    }
)
_INFO = orjson.dumps(
    {
        "vllm_config": {
            "model_config": {
                "model": "bench-model",
                "dtype": "torch.bfloat16",
                "max_model_len": 8192,
            },
            "lora_config": {"max_lora_rank": 8, "max_loras": 6, "max_cpu_loras": 8},
            "parallel_config": {"data_parallel_size": 1},
            "cache_config": {"block_size": 16},
        },
        "vllm_env": {},
        "system_env": {},
    }
)


def _response(body: bytes, status: bytes = b"200 OK") -> bytes:
    return (
        b"HTTP/1.1 "
        + status
        + b"\r\nContent-Type: application/json\r\nContent-Length: "
        + str(len(body)).encode()
        + b"\r\n\r\n"
        + body
    )


_ROUTES = {
    b"GET /health": _response(b""),
    b"GET /v1/models": _response(_MODELS),
    b"GET /server_info": _response(_INFO),
    b"POST /v1/completions": _response(_COMPLETION),
}
_NOT_FOUND = _response(b'{"error":"not found"}', b"404 Not Found")


class _Protocol(asyncio.Protocol):
    def __init__(self, delay_s: float) -> None:
        self.delay_s = delay_s
        self.buffer = b""
        self.transport: asyncio.WriteTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.WriteTransport, transport)  # uvloop's is not a subclass

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while True:
            head_end = self.buffer.find(b"\r\n\r\n")
            if head_end < 0:
                return
            head = self.buffer[:head_end]
            length = 0
            marker = head.lower().find(b"content-length:")
            if marker >= 0:
                line_end = head.find(b"\r\n", marker)
                length = int(head[marker + 15 : line_end if line_end >= 0 else None])
            total = head_end + 4 + length
            if len(self.buffer) < total:
                return
            self.buffer = self.buffer[total:]
            request_line = head[: head.find(b"\r\n")]
            method, target = request_line.split(b" ")[:2]
            reply = _ROUTES.get(method + b" " + target.split(b"?")[0], _NOT_FOUND)
            if self.delay_s and method == b"POST":
                asyncio.get_running_loop().call_later(self.delay_s, self._send, reply)
            else:
                self._send(reply)

    def _send(self, reply: bytes) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(reply)


async def serve(ports: list[int], delay_s: float) -> None:
    """One listener per port (many replicas from one cheap process, for the scale suite)."""
    loop = asyncio.get_running_loop()
    servers = [
        await loop.create_server(lambda: _Protocol(delay_s), "127.0.0.1", port, backlog=4096)
        for port in ports
    ]
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    print(f"fast replica ready on http://127.0.0.1:{ports[0]} (+{len(ports) - 1})", flush=True)
    await stop.wait()
    for server in servers:
        server.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.harness.fast_replica")
    parser.add_argument("--port", type=int, required=True, nargs="+")
    parser.add_argument("--delay-s", type=float, default=0.0)
    args = parser.parse_args(argv)
    import uvloop

    uvloop.run(serve(list(args.port), args.delay_s))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
