"""Closed-loop HTTP load for the overhead suite, run as its own process(es).

``concurrency`` workers each send TRL-shaped completion requests back to back until ``requests``
have been sent; prints one JSON line: count, errors, wall time, latency samples, the answers'
body bytes and the process's own CPU time, so the suite can check the generator is not the
bottleneck. It sends through the proxy's own keep-alive client (``proxy.upstream.connpool``),
which costs a fraction of an aiohttp client session per request. With ``--stream`` each request
asks for a streamed answer (and its token ids, as TRL does); an answer counts as an error unless
it is a 200 that ends in ``data: [DONE]``. With ``--burst`` every worker sends one request and
all start at once (a first wave): each latency counts, ramp included. ``statuses`` counts the
answers by HTTP status (``0``: no answer, a transport failure or a timeout). ``--url`` may list
several servers (comma-separated): worker ``i`` sends to the ``i``-th, round robin (a baseline
straight to the replicas).

    python -m benchmarks.harness.blast --url http://127.0.0.1:8000 --concurrency 64 --requests 4000
"""

from __future__ import annotations

import asyncio
import os
import random
import resource
import sys
import time

import orjson

from proxy.config.programs import OneLineParser
from proxy.upstream.connpool import DEFAULT_MAX_CONNECTING, ConnectionPool
from proxy.upstream.errors import WireError

JSON = "application/json"
PATH = "/v1/completions"
MODEL = "bench-model"  # what benchmarks.harness.fast_replica serves
VOCAB = 150_000
DONE = b"data: [DONE]\n\n"  # a whole stream's last event


def bodies(
    tokens: int,
    count: int = 64,
    seed: int = 0,
    model: str = MODEL,
    vocab: int = VOCAB,
    max_tokens: int = 16,
    stream: bool = False,
) -> list[bytes]:
    """``count`` GRPO-like prompts: a shared template, then a distinct problem each."""
    rng = random.Random(seed)
    template = [rng.randrange(vocab) for _ in range(min(tokens // 3, 512))]
    out = []
    for _ in range(count):
        prompt = template + [rng.randrange(vocab) for _ in range(tokens - len(template))]
        out.append(
            orjson.dumps(
                {
                    "model": model,
                    "prompt": prompt,
                    "max_tokens": max_tokens,
                    "temperature": 1.0,
                    "n": 1,
                    "return_token_ids": True,
                    "logprobs": 0,
                    **({"stream": True} if stream else {}),
                }
            )
        )
    return out


async def run(
    url: str,
    concurrency: int,
    requests: int,
    tokens: int,
    seed: int,
    model: str = MODEL,
    vocab: int = VOCAB,
    max_tokens: int = 16,
    stream: bool = False,
    burst: bool = False,
    timeout_s: float = 30.0,
) -> dict[str, object]:
    urls = [u.rstrip("/") for u in url.split(",")]
    payloads = bodies(tokens, 64, seed, model, vocab, max_tokens, stream)
    latencies: list[float] = []
    errors = 0
    sent = 0
    received = 0
    statuses: dict[int, int] = {}
    # The proxy's own lean keep-alive client: the generator must cost less than what it loads.
    # A burst's clients connect all at once, as a rollout worker's fresh pool does.
    pool = ConnectionPool(
        connect_timeout_s=5.0, request_timeout_s=timeout_s, idle_s=60.0,
        max_connecting=max(requests, 1) if burst else DEFAULT_MAX_CONNECTING,
    )  # fmt: skip
    if burst:  # one request per worker, a connection each, all at once
        concurrency = requests

    async def worker(index: int) -> None:
        nonlocal sent, errors, received
        first = True
        while sent < requests:
            body = payloads[(sent + index) % len(payloads)]
            sent += 1
            started = time.perf_counter()
            status = 0
            try:
                async with pool.request(urls[index % len(urls)], "POST", PATH, body, JSON) as resp:
                    status = resp.status
                    data = await resp.read()
                    ok = resp.status == 200 and (not stream or data.endswith(DONE))
                    received += len(data)
            except (WireError, TimeoutError):
                ok = False
            statuses[status] = statuses.get(status, 0) + 1
            # A worker's first request opens its connection and starts with every other worker
            # at once: it measures the ramp, not the steady state, so its latency is left out
            # (unless the ramp is what is measured: ``burst``).
            if burst or not first:
                latencies.append(time.perf_counter() - started)
            first = False
            errors += not ok

    started = time.perf_counter()
    try:
        await asyncio.gather(*(worker(i) for i in range(concurrency)))
    finally:
        pool.close()
    wall = time.perf_counter() - started
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return {
        "count": sent,  # every request sent has been answered or failed by now
        "errors": errors,
        "wall_s": wall,
        "latencies": latencies,
        "bytes": received,
        "cpu_s": usage.ru_utime + usage.ru_stime,
        "statuses": {str(code): n for code, n in sorted(statuses.items())},
    }


def main(argv: list[str] | None = None) -> int:
    parser = OneLineParser(prog="python -m benchmarks.harness.blast")
    parser.add_argument("--url", required=True, help="the server (or URL,URL,...: round robin)")
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--requests", type=int, default=4000)
    parser.add_argument("--tokens", type=int, default=600)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--served-model-name", dest="model", default=MODEL, help="the model name the replicas serve"
    )
    parser.add_argument("--vocab", type=int, default=VOCAB, help="prompt token ids stay below")
    parser.add_argument("--max-tokens", type=int, default=16, help="tokens asked per request")
    parser.add_argument("--stream", action="store_true", help="ask for streamed answers")
    parser.add_argument(
        "--burst", action="store_true", help="one request per worker, all at once (a first wave)"
    )
    parser.add_argument("--timeout", type=float, default=30.0, help="seconds an answer may take")
    args = parser.parse_args(argv)
    import uvloop

    result = uvloop.run(
        run(
            args.url,
            args.concurrency,
            args.requests,
            args.tokens,
            args.seed,
            args.model,
            args.vocab,
            args.max_tokens,
            args.stream,
            args.burst,
            args.timeout,
        )
    )
    # The loop may have left the inherited stdout pipe non-blocking: a line longer than the pipe
    # buffer (the latency samples of a long run) would then be cut short at exit.
    os.set_blocking(sys.stdout.fileno(), True)
    sys.stdout.write(orjson.dumps(result).decode() + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
