"""The CPU a resumable stream pays over a bare pass-through, in process, no sockets: its plan at
the request (``proxy.dataplane.resumable``) and its ledger per chunk
(``proxy.dataplane.ledger.StreamLedger.feed``, the SSE framer and the byte scan included), on
the chunks vLLM writes for a stream of ``tokens`` tokens, one event per read as the proxy gets
them: a completion of a ``prompt``-token prompt (with and without logprobs) and a chat stream,
the client asking for the token ids itself or not (then the proxy asks and strips them).

    python -m benchmarks.micro.stream [--tokens 40] [--prompt 1000]
"""

from __future__ import annotations

import random
import time
import timeit
from typing import Any

import orjson

from proxy.config.programs import OneLineParser, help_text
from proxy.dataplane.ledger import StreamLedger
from proxy.dataplane.resumable import resumable

REPEATS = 9  # the best of REPEATS is reported (the least disturbed): CPU time, not wall time
MODEL = "trl-policy-v7"
Json = dict[str, Any]


def request(kind: str, prompt: list[int], tokens: int, wants: bool, logprobs: bool) -> bytes:
    body: Json = {"model": MODEL, "max_tokens": tokens, "temperature": 1.0, "stream": True,
                  "stream_options": {"include_usage": True}}  # fmt: skip
    if kind == "chat":
        body["messages"] = [{"role": "user", "content": "question " * (len(prompt) // 2)}]
    else:
        body["prompt"] = prompt
    if logprobs:
        body["logprobs"] = 1
    if wants:
        body["return_token_ids"] = True
    return orjson.dumps(body)


def chunks(kind: str, prompt: list[int], tokens: int, logprobs: bool, seed: int) -> list[bytes]:
    """The reads of one stream as vLLM writes it with ``return_token_ids`` (its field order,
    compact JSON): the prompt's ids on the first chunk (a chat stream's role chunk), a chunk
    per token, then the usage chunk and ``[DONE]``."""
    rng = random.Random(seed)
    head = {"id": f"cmpl-{rng.getrandbits(128):032x}", "created": 1_760_000_000, "model": MODEL}
    reads = []
    if kind == "chat":
        role = {"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None,
                "finish_reason": None}  # fmt: skip
        first = {**head, "object": "chat.completion.chunk", "choices": [role]}
        reads.append(_event({**first, "prompt_token_ids": prompt}))
    for step in range(tokens):
        token, text = rng.randrange(150_000), f" w{rng.randrange(1000)}"
        finish = "length" if step == tokens - 1 else None
        ids = prompt if step == 0 and kind == "completion" else None
        reads.append(_event(_chunk(kind, head, token, text, finish, ids, step, logprobs)))
    usage = {"prompt_tokens": len(prompt), "completion_tokens": tokens,
             "total_tokens": len(prompt) + tokens}  # fmt: skip
    obj = "text_completion" if kind == "completion" else "chat.completion.chunk"
    reads.append(_event({**head, "object": obj, "choices": [], "usage": usage}))
    return [*reads, b"data: [DONE]\n\n"]


def _chunk(
    kind: str, head: Json, token: int, text: str, finish: str | None, prompt: list[int] | None,
    step: int, logprobs: bool,
) -> Json:  # fmt: skip
    if kind == "chat":
        choice = {"index": 0, "delta": {"content": text}, "logprobs": None,
                  "finish_reason": finish, "token_ids": [token]}  # fmt: skip
        return {**head, "object": "chat.completion.chunk", "choices": [choice]}
    lp = None
    if logprobs:
        lp = {"text_offset": [step * 5], "token_logprobs": [-0.25], "tokens": [text],
              "top_logprobs": [{text: -0.25}]}  # fmt: skip
    choice = {"index": 0, "text": text, "logprobs": lp, "finish_reason": finish,
              "stop_reason": None, "prompt_token_ids": prompt, "token_ids": [token]}  # fmt: skip
    return {**head, "object": "text_completion", "choices": [choice], "usage": None}


def _event(chunk: Json) -> bytes:
    return b"data: " + orjson.dumps(chunk) + b"\n\n"


def measure(kind: str, tokens: int, prompt_tokens: int, wants: bool, logprobs: bool) -> Json:
    """Microseconds for the plan of one request and for the ledger of its whole stream."""
    prompt = [random.Random(1).randrange(150_000) for _ in range(prompt_tokens)]
    body = request(kind, prompt, tokens, wants, logprobs)
    route = "completions" if kind == "completion" else "chat_completions"
    found = resumable(route, body)
    assert found is not None, "a resumable request"
    plan = found[0]
    reads = chunks(kind, prompt, tokens, logprobs, seed=2)

    def stream() -> None:
        ledger = StreamLedger(plan)
        for read in reads:
            ledger.feed(read)

    def planned() -> object:
        return resumable(route, body)

    cpu = time.process_time
    plan_us = min(timeit.repeat(planned, cpu, number=2000, repeat=REPEATS)) / 2000 * 1e6
    stream_us = min(timeit.repeat(stream, cpu, number=200, repeat=REPEATS)) / 200 * 1e6
    return {"plan_us": plan_us, "stream_us": stream_us, "chunk_us": stream_us / len(reads)}


def main(argv: list[str] | None = None) -> None:
    parser = OneLineParser(
        prog="python -m benchmarks.micro.stream", description=help_text(__doc__.split("\n\n")[0])
    )
    parser.add_argument("--tokens", type=int, default=40, help="tokens a stream generates")
    parser.add_argument("--prompt", type=int, default=1000, help="prompt tokens (completions)")
    args = parser.parse_args(argv)
    print(f"{'stream':<34} {'plan us':>8} {'ledger us':>10} {'us/chunk':>9}")
    for kind, logprobs in (("completion", False), ("completion", True), ("chat", False)):
        for wants in (True, False):
            row = measure(kind, args.tokens, args.prompt, wants, logprobs)
            name = f"{kind}{' +logprobs' if logprobs else ''}, ids {'asked' if wants else 'added'}"
            print(f"{name:<34} {row['plan_us']:8.1f} {row['stream_us']:10.1f} "
                  f"{row['chunk_us']:9.2f}")  # fmt: skip


if __name__ == "__main__":
    main()
