"""Streams whose server-sent events an intermediary reframed (CRLF or CR line ends, comment lines
inside events, a payload over two data lines, the bytes in small pieces or one by one) reach the
client through the proxy whole: ``[DONE]`` and the same tokens as the replica gives directly,
with one replica and across a migration (its replica hangs up after the first token).

The proxy writes LF line ends; comments pass (those inside an event before its data). Before
the SSE framer, each of these streams ended "without [DONE]" after 0 tokens: the proxy read
its events on LF alone.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import orjson
import pytest

from proxy.app import PROXY, build_app, serve
from proxy.config import Settings
from tests.support.fleet import FAST_HEALTH, run_sim
from tests.support.reframe import Reframe, reframing
from tests.support.waiting import wait_for

MODEL = "sim-model"
MAX_TOKENS = 6
STYLES = {
    "crlf": Reframe(end=b"\r\n"),
    "cr": Reframe(end=b"\r"),
    "comments": Reframe(comments=True),
    "data-lines": Reframe(lines=True),
    "every-byte": Reframe(end=b"\r\n", piece=1),  # each CRLF split between two reads
    "all": Reframe(end=b"\r", comments=True, lines=True, piece=9, seed=3),
}
PATHS = {"completion": "/v1/completions", "chat": "/v1/chat/completions"}
ANNOUNCE = re.compile(rb"X-Rollout-Replica: (\S+) \(after (\d+) tokens\)")


@dataclass
class Stack:
    url: str
    replicas: list[str]  # the relays' ids (what the proxy calls its replicas)
    direct: str  # a replica's own URL, for the answers to compare with
    session: aiohttp.ClientSession


@asynccontextmanager
async def reframed(how: Reframe, faults: list[dict[str, Any]]) -> AsyncIterator[Stack]:
    """The proxy in front of one simulated replica per entry of ``faults``, each behind a
    reframing relay; least-loaded routing, so a lone request goes to the first."""
    async with AsyncExitStack() as exits:
        sims = [await exits.enter_async_context(run_sim(faults=f)) for f in faults]
        urls = [await exits.enter_async_context(reframing(s.url, how)) for s in sims]
        settings = {"replicas": urls, "policy": "least_loaded", **FAST_HEALTH}
        app = build_app(Settings.model_validate(settings))
        url = await exits.enter_async_context(serve(app))
        session = await exits.enter_async_context(aiohttp.ClientSession())
        pool = app[PROXY].fleet.pool
        await wait_for(lambda: len(pool.routable()) == len(urls), what="replicas routable")
        yield Stack(url, [u.split("//", 1)[1] for u in urls], sims[-1].url, session)


def body(kind: str, **extra: Any) -> dict[str, Any]:
    prompt: dict[str, Any] = (
        {"prompt": [11, 12, 13]} if kind == "completion"
        else {"messages": [{"role": "user", "content": "hi"}]}
    )  # fmt: skip
    return {"model": MODEL, **prompt, "max_tokens": MAX_TOKENS, "stream": True,
            "stream_options": {"include_usage": True}, **extra}  # fmt: skip


@dataclass
class Seen:
    ids: list[int] = field(default_factory=list)  # from the ids, or the text (chat)
    chunks: list[dict[str, Any]] = field(default_factory=list)
    comments: list[bytes] = field(default_factory=list)
    done: bool = False


async def streamed(stack: Stack, kind: str, **extra: Any) -> Seen:
    async with stack.session.post(stack.url + PATHS[kind], json=body(kind, **extra)) as response:
        assert response.status == 200, await response.text()
        raw = await response.read()
    assert b"\r" not in raw, "the proxy writes LF line ends"
    seen = Seen()
    for block in raw.split(b"\n\n")[:-1]:
        lines = block.split(b"\n")
        seen.comments += [line for line in lines if line.startswith(b":")]
        data = b"\n".join(line[6:] for line in lines if line.startswith(b"data: "))
        if data == b"[DONE]":
            seen.done = True
        elif data:
            seen.chunks.append(orjson.loads(data))
    for chunk in seen.chunks:
        for choice in chunk["choices"]:
            text = choice.get("text") or (choice.get("delta") or {}).get("content") or ""
            seen.ids += [int(t) for t in re.findall(r" t(\d+)", text)]  # the sim's " t<id>"
    return seen


async def direct(stack: Stack, kind: str, prefix: list[int] | None = None) -> dict[str, Any]:
    """The replica's own answer (not streamed, with ids); ``prefix``: its continuation after
    those tokens, as a completion of the prompt's ids."""
    ask = {**body(kind), "stream": False, "return_token_ids": True}
    if prefix is not None:
        ask = {"model": MODEL, "prompt": prefix, "max_tokens": MAX_TOKENS,
               "return_token_ids": True}  # fmt: skip
    path = PATHS[kind] if prefix is None else PATHS["completion"]
    async with stack.session.post(stack.direct + path, json=ask) as response:
        answer: dict[str, Any] = await response.json()
        return answer


def prompt_of(answer: dict[str, Any], kind: str) -> list[int]:
    found: list[int] = (answer if kind == "chat" else answer["choices"][0])["prompt_token_ids"]
    return found


@pytest.mark.parametrize("kind", ["completion", "chat"])
@pytest.mark.parametrize("style", STYLES)
async def test_a_reframed_stream_completes_with_the_tokens_of_the_replica(
    style: str, kind: str
) -> None:
    """Fails on LF-only framing (CRLF and CR: no event ever ends), on comments inside an event
    taken for its end or its data, on data lines not joined, on a CRLF split between two reads
    taken for two line ends, and on an ids strip (chat: not asked for) that misses a chunk."""
    async with reframed(STYLES[style], [{}]) as stack:
        seen = await streamed(stack, kind)
        answer = await direct(stack, kind)
    assert seen.done
    assert seen.ids == answer["choices"][0]["token_ids"]
    assert seen.chunks[-1]["usage"]["completion_tokens"] == MAX_TOKENS
    if kind == "chat":
        assert all("token_ids" not in c for chunk in seen.chunks for c in chunk["choices"])
        assert all("prompt_token_ids" not in chunk for chunk in seen.chunks)
    if STYLES[style].comments:
        assert b": ping" in seen.comments and b": before" in seen.comments


@pytest.mark.parametrize("kind", ["completion", "chat"])
@pytest.mark.parametrize("style", STYLES)
async def test_a_reframed_stream_carries_on_after_its_replica_hangs_up(
    style: str, kind: str
) -> None:
    """Its first replica hangs up after the first token; the survivor carries the stream on.
    Fails when the tokens counted on reframed bytes are not those the client has (a token sent
    twice or skipped; before the framer, a payload over two data lines passed unread and
    uncounted, so a migration sent its tokens again), and on a continuation whose reframed
    chunks are not rewritten into the client's stream."""
    async with reframed(STYLES[style], [{"drop_mid_response": True}, {}]) as stack:
        seen = await streamed(stack, kind, return_token_ids=kind == "completion")
        answer = await direct(stack, kind)
        (found,) = [ANNOUNCE.search(c) for c in seen.comments if ANNOUNCE.search(c)]
        assert found is not None
        after = int(found[2])
        tail = await direct(stack, kind, prompt_of(answer, kind) + seen.ids[:after])
    assert seen.done
    assert found[1].decode() == stack.replicas[1]
    assert seen.ids[:after] == answer["choices"][0]["token_ids"][:after]
    assert seen.ids[after:] == tail["choices"][0]["token_ids"][: MAX_TOKENS - after]
    assert len(seen.ids) == MAX_TOKENS
    assert seen.chunks[-1]["usage"] == {
        "prompt_tokens": len(prompt_of(answer, kind)), "completion_tokens": MAX_TOKENS,
        "total_tokens": len(prompt_of(answer, kind)) + MAX_TOKENS,
    }  # fmt: skip
    assert len({chunk["id"] for chunk in seen.chunks}) == 1
