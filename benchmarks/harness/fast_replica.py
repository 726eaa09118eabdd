"""A minimal, fast vLLM stand-in for the overhead suite: cheaper than the proxy it measures.

A raw asyncio protocol (on uvloop) that speaks just enough HTTP/1.1 keep-alive: ``/health``,
``/v1/models`` and ``/server_info`` answered like vLLM, and ``POST /v1/completions`` answered with
a fixed TRL-shaped completion after an optional delay. No JSON parsing, no framework.

A request whose body holds ``"stream": true`` (found in its bytes, not parsed) is answered as
vLLM streams a completion: server-sent events in chunked transfer coding, one event
per token (``--stream-chunks`` of them) in vLLM's ``text_completion`` chunk shape, the prompt's
token ids (the request's ``prompt`` list, copied as its bytes came) in the first, ``finish_reason``
in the last, then ``data: [DONE]``. One event is written per turn of the event loop, as a
replica's decode steps send them: all streams move on together, a token each per turn. Each
answer's events but the first are made once, at start; the first costs one copy of the prompt.

    python -m benchmarks.harness.fast_replica --port 9201 [--delay-s 0.02] [--stream-chunks 40]
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


_COMPLETIONS = b"POST /v1/completions"
_ROUTES = {
    b"GET /health": _response(b""),
    b"GET /v1/models": _response(_MODELS),
    b"GET /server_info": _response(_INFO),
    _COMPLETIONS: _response(_COMPLETION),
}
_NOT_FOUND = _response(b'{"error":"not found"}', b"404 Not Found")
_STREAM_HEAD = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream; charset=utf-8\r\n"
    b"Cache-Control: no-cache\r\nTransfer-Encoding: chunked\r\n\r\n"
)
_STREAM = b'"stream"'
_PROMPT = b'"prompt"'
_SEPARATOR = b": \t\r\n"  # what JSON allows between a key and its value, the colon included
_PROMPT_MARK = b'"__prompt__"'  # where the first event's prompt ids go
DONE = b"data: [DONE]\n\n"


def stream_event(step: int, chunks: int, first: bool) -> bytes:
    """Event ``step`` of a streamed completion of ``chunks`` tokens, in vLLM's shape; the first
    holds ``_PROMPT_MARK`` where the prompt's ids go."""
    choice = {
        "index": 0,
        "text": " x",
        "logprobs": {
            "text_offset": [2 * step],
            "token_logprobs": [-0.5],
            "tokens": [" x"],
            "top_logprobs": [{" x": -0.5}],
        },
        "finish_reason": "length" if step + 1 == chunks else None,
        "stop_reason": None,
        "prompt_token_ids": "__prompt__" if first else None,
        "token_ids": [100 + step],
    }
    chunk = {
        "id": "cmpl-bench",
        "object": "text_completion",
        "created": 0,
        "model": "bench-model",
        "choices": [choice],
    }
    return b"data: " + orjson.dumps(chunk) + b"\n\n"


def _http_chunk(data: bytes) -> bytes:
    return b"%x\r\n%b\r\n" % (len(data), data)


class StreamAnswer:
    """A streamed completion's writes, made once: only the first event differs per request."""

    def __init__(self, chunks: int) -> None:
        self._before, self._after = stream_event(0, chunks, first=True).split(_PROMPT_MARK)
        rest = [stream_event(step, chunks, first=False) for step in range(1, chunks)]
        self._rest = [*map(_http_chunk, rest), _http_chunk(DONE) + b"0\r\n\r\n"]

    def writes(self, body: bytes) -> list[bytes]:
        """The answer to request ``body``: the head with the first event, then one write per
        event, ``[DONE]`` and the end of the chunked body last."""
        first = _http_chunk(self._before + prompt_ids(body) + self._after)
        return [_STREAM_HEAD + first, *self._rest]


def streamed(body: bytes) -> bool:
    """Whether the request body asks for a stream (``"stream": true``)."""
    return _value(body, _STREAM).startswith(b"true")


def prompt_ids(body: bytes) -> bytes:
    """The request's ``prompt`` token-id list as its JSON came (to its first ``]``: a flat list
    of ids), or ``null`` when it has none."""
    value = _value(body, _PROMPT)
    end = value.find(b"]")
    return value[: end + 1] if value.startswith(b"[") and end > 0 else b"null"


def _value(body: bytes, key: bytes) -> bytes:
    """The body's bytes from ``key``'s value on (empty when the key is absent)."""
    at = body.find(key)
    return b"" if at < 0 else body[at + len(key) :].lstrip(_SEPARATOR)


class _Protocol(asyncio.Protocol):
    def __init__(self, delay_s: float, stream: StreamAnswer) -> None:
        self.delay_s = delay_s
        self.stream = stream
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
            body = self.buffer[head_end + 4 : total]
            self.buffer = self.buffer[total:]
            request_line = head[: head.find(b"\r\n")]
            method, target = request_line.split(b" ")[:2]
            route = method + b" " + target.split(b"?")[0]
            if route == _COMPLETIONS and streamed(body):
                writes = self.stream.writes(body)
            else:
                writes = [_ROUTES.get(route, _NOT_FOUND)]
            if self.delay_s and method == b"POST":
                asyncio.get_running_loop().call_later(self.delay_s, self._send, writes, 0)
            else:
                self._send(writes, 0)

    def _send(self, writes: list[bytes], at: int) -> None:
        """Write ``writes[at]``; the next one on the loop's next turn."""
        if self.transport is None or self.transport.is_closing():
            return
        self.transport.write(writes[at])
        if at + 1 < len(writes):
            asyncio.get_running_loop().call_soon(self._send, writes, at + 1)


async def serve(ports: list[int], delay_s: float, stream_chunks: int = 40) -> None:
    """One listener per port (many replicas from one cheap process, for the scale suite)."""
    loop = asyncio.get_running_loop()
    stream = StreamAnswer(stream_chunks)
    servers = [
        await loop.create_server(
            lambda: _Protocol(delay_s, stream), "127.0.0.1", port, backlog=4096
        )
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
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.harness.fast_replica", allow_abbrev=False
    )
    parser.add_argument("--port", type=int, required=True, nargs="+")
    parser.add_argument("--delay-s", type=float, default=0.0)
    parser.add_argument(
        "--stream-chunks", type=int, default=40, help="events (tokens) of a streamed answer"
    )
    args = parser.parse_args(argv)
    if args.stream_chunks < 1:
        parser.error("--stream-chunks: at least 1")
    import uvloop

    uvloop.run(serve(list(args.port), args.delay_s, args.stream_chunks))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
