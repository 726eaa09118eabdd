"""Streams whose replica is SIGKILLed mid-stream carry on from the other replica (black box).

Two simulated replicas run as their own processes; 40 streamed requests share one routing key,
so all of them stream from one replica, which is SIGKILLed once every stream has its first
tokens. Each stream must end with ``[DONE]`` and ``max_tokens`` tokens (the simulation never
samples an end token), its text must be its tokens' text (nothing sent twice or skipped), its
``usage`` must count its own prompt and every token, and the tokens after the migration point
must be exactly what the surviving replica generates from the prompt plus the tokens before it.
On the code before stream migration every one of these streams ends after a few chunks without
``[DONE]`` (and with ``--max-stream-migrations 0`` it still does: the last test).
"""

from __future__ import annotations

import asyncio
import re
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import orjson

from proxy.app import PROXY, build_app, serve
from proxy.config import Settings
from tests.support.fleet import FAST_HEALTH, run_stack
from tests.support.waiting import wait_for

STREAMS = 40
MAX_TOKENS = 30
GEN_TOKEN_S = 0.1  # a stream takes ~3 s: the kill lands mid-stream however busy the machine
BOUND_S = 60.0
READY = re.compile(rb"replica ready on (http://[\d.]+:\d+)")
MODEL = "sim-model"
NO_SPILL: dict[str, Any] = {
    "load_factor": 1000.0,
    "load_slack": 100000,
}  # one routing key, one replica
ANNOUNCE = re.compile(r"X-Rollout-Replica: (\S+) \(after (\d+) tokens\)")


@dataclass
class Replica:
    url: str
    process: asyncio.subprocess.Process

    @property
    def id(self) -> str:
        return self.url.split("//", 1)[1]


@asynccontextmanager
async def replica_process() -> AsyncIterator[Replica]:
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "replica_entry", "--backend", "sim", "--port", "0",
        "--gen-token-s", str(GEN_TOKEN_S),
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        assert process.stdout is not None
        found = READY.search(await asyncio.wait_for(process.stdout.readline(), 30))
        assert found is not None, "the simulated replica did not start"
        yield Replica(found[1].decode(), process)
    finally:
        if process.returncode is None:
            process.kill()
        await process.wait()


@dataclass
class Stream:
    """What one client saw of its stream."""

    ids: list[int] = field(default_factory=list)
    text: str = ""
    finishes: list[str] = field(default_factory=list)
    usage: dict[str, int] | None = None
    done: bool = False
    comments: list[str] = field(default_factory=list)
    chunks: list[dict[str, Any]] = field(default_factory=list)
    error: str | None = None


async def read_stream(
    session: aiohttp.ClientSession, url: str, path: str, body: dict[str, Any], seen: Stream
) -> Stream:
    headers = {"X-Routing-Key": "one-group"}
    try:
        async with session.post(url + path, json=body, headers=headers) as response:
            assert response.status == 200, await response.text()
            async for raw in response.content:
                line = raw.decode().strip()
                if line.startswith(":"):
                    seen.comments.append(line)
                elif line == "data: [DONE]":
                    seen.done = True
                elif line.startswith("data: "):
                    _take(seen, orjson.loads(line[6:]))
    except aiohttp.ClientPayloadError as exc:
        seen.error = str(exc)
    return seen


def _take(seen: Stream, chunk: dict[str, Any]) -> None:
    seen.chunks.append(chunk)
    if chunk.get("usage"):
        seen.usage = chunk["usage"]
    for choice in chunk["choices"]:
        seen.ids += choice.get("token_ids") or []
        seen.text += choice.get("text") or (choice.get("delta") or {}).get("content") or ""
        if choice.get("finish_reason"):
            seen.finishes.append(choice["finish_reason"])


def piece_ids(text: str) -> list[int]:
    """The simulated tokenizer's text is `` t<id>`` per token: the ids a text spells."""
    return [int(part) for part in re.findall(r" t(\d+)", text)]


class Fleet:
    """The proxy (in process) in front of two replica processes."""

    def __init__(self, url: str, app: Any, replicas: list[Replica], session: Any) -> None:
        self.url, self.app, self.replicas, self.session = url, app, replicas, session
        self.doomed = self.survivor = replicas[0]

    async def through_a_kill(self, path: str, bodies: list[dict[str, Any]]) -> list[Stream]:
        """Start the streams; SIGKILL their replica once each has its first tokens."""
        seen = [Stream() for _ in bodies]
        tasks = [asyncio.create_task(read_stream(self.session, self.url, path, body, s))
                 for body, s in zip(bodies, seen, strict=True)]  # fmt: skip
        await wait_for(lambda: all(len(s.chunks) >= 2 for s in seen), BOUND_S, "first tokens")
        pool = self.app[PROXY].fleet.pool
        busy = [r for r in self.replicas if getattr(pool.get(r.id), "inflight", 0)]
        assert len(busy) == 1, "one routing key: every stream on one replica"
        self.doomed = busy[0]
        self.survivor = next(r for r in self.replicas if r is not self.doomed)
        assert not any(s.finishes for s in seen), "the kill lands mid-stream"
        self.doomed.process.send_signal(signal.SIGKILL)
        return await asyncio.wait_for(asyncio.gather(*tasks), BOUND_S)

    async def direct(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        """The survivor's own answer, not through the proxy."""
        async with self.session.post(self.survivor.url + path, json=body) as response:
            assert response.status == 200, await response.text()
            answer: dict[str, Any] = await response.json()
            return answer

    async def continuation(self, prompt: list[int], tokens: int) -> list[int]:
        """The tokens the survivor generates after ``prompt``."""
        body = {"model": MODEL, "prompt": prompt, "max_tokens": tokens, "return_token_ids": True}
        ids: list[int] = (await self.direct("/v1/completions", body))["choices"][0]["token_ids"]
        return ids

    async def migrations(self, outcome: str) -> float:
        async with self.session.get(self.url + "/metrics") as response:
            page = await response.text()
        found = re.search(
            rf'rollout_proxy_stream_migrations_total{{outcome="{outcome}"}} (\S+)', page
        )
        assert found is not None, f"no stream_migrations {outcome} in /metrics"
        return float(found[1])


@asynccontextmanager
async def fleet(**settings: Any) -> AsyncIterator[Fleet]:
    async with AsyncExitStack() as exits:
        replicas = [await exits.enter_async_context(replica_process()) for _ in range(2)]
        urls = [r.url for r in replicas]
        config = Settings.model_validate({"replicas": urls, **FAST_HEALTH, **NO_SPILL, **settings})
        app = build_app(config)
        url = await exits.enter_async_context(serve(app))
        session = await exits.enter_async_context(aiohttp.ClientSession())
        pool = app[PROXY].fleet.pool
        await wait_for(lambda: len(pool.routable()) == 2, 30, "both replicas routable")
        yield Fleet(url, app, replicas, session)


def announced(seen: Stream) -> tuple[str, int]:
    """The replica that carried the stream on, and after how many tokens (its SSE comment)."""
    assert len(seen.comments) == 1, seen.comments
    found = ANNOUNCE.search(seen.comments[0])
    assert found is not None, seen.comments
    return found[1], int(found[2])


def completion_body(i: int) -> dict[str, Any]:
    return {
        "model": MODEL, "prompt": [i + 1, 7, 8, 9], "max_tokens": MAX_TOKENS, "stream": True,
        "return_token_ids": True, "stream_options": {"include_usage": True},
    }  # fmt: skip


async def test_completion_streams_on_a_killed_replica_finish_on_the_survivor() -> None:
    bodies = [completion_body(i) for i in range(STREAMS)]
    async with fleet() as f:
        seen = await f.through_a_kill("/v1/completions", bodies)
        tails = []
        for body, s in zip(bodies, seen, strict=True):
            assert s.done, s.error
            assert s.error is None
            assert len(s.ids) == MAX_TOKENS
            assert piece_ids(s.text) == s.ids  # every token's text, once
            assert s.finishes == ["length"]
            prompt = len(body["prompt"])
            assert s.usage == {"prompt_tokens": prompt, "completion_tokens": MAX_TOKENS,
                               "total_tokens": prompt + MAX_TOKENS}  # fmt: skip
            replica, after = announced(s)
            assert replica == f.survivor.id
            assert 0 < after < MAX_TOKENS
            assert s.chunks[0]["choices"][0]["prompt_token_ids"] == body["prompt"]
            assert len({chunk["id"] for chunk in s.chunks}) == 1  # one stream, one id
            tails.append(f.continuation(body["prompt"] + s.ids[:after], MAX_TOKENS - after))
        # The tokens after the migration point: the survivor's own continuation, token for token.
        expected = await asyncio.gather(*tails)
        assert [s.ids[announced(s)[1] :] for s in seen] == expected
        assert await f.migrations("continued") == STREAMS


async def test_chat_streams_continue_without_showing_the_ids_they_did_not_ask_for() -> None:
    messages = [[{"role": "user", "content": f"question {i}"}] for i in range(10)]
    bodies = [
        {"model": MODEL, "messages": m, "max_tokens": MAX_TOKENS, "stream": True,
         "stream_options": {"include_usage": True}}
        for m in messages
    ]  # fmt: skip
    async with fleet() as f:
        seen = await f.through_a_kill("/v1/chat/completions", bodies)
        tails = []
        for body, s in zip(bodies, seen, strict=True):
            assert s.done, s.error
            ids = piece_ids(s.text)
            assert len(ids) == MAX_TOKENS
            assert s.finishes == ["length"]
            assert all("token_ids" not in c and "prompt_token_ids" not in c for c in s.chunks)
            assert all("token_ids" not in ch for c in s.chunks for ch in c["choices"])
            assert {c["object"] for c in s.chunks} == {"chat.completion.chunk"}
            probe = {**body, "stream": False, "max_tokens": 1, "return_token_ids": True}
            prompt = (await f.direct("/v1/chat/completions", probe))["prompt_token_ids"]
            assert s.usage is not None
            assert s.usage["prompt_tokens"] == len(prompt)
            assert s.usage["completion_tokens"] == MAX_TOKENS
            _, after = announced(s)
            tails.append(f.continuation(prompt + ids[:after], MAX_TOKENS - after))
        expected = await asyncio.gather(*tails)
        assert [piece_ids(s.text)[announced(s)[1] :] for s in seen] == expected
        assert await f.migrations("continued") == len(bodies)


async def test_without_migration_the_streams_are_cut_as_before() -> None:
    bodies = [completion_body(i) for i in range(8)]
    async with fleet(max_stream_migrations=0) as f:
        seen = await f.through_a_kill("/v1/completions", bodies)
        assert all(not s.done and s.error is not None for s in seen)
        assert all(len(s.ids) < MAX_TOKENS for s in seen)
        assert await f.migrations("continued") == 0


async def test_streams_on_a_hung_replica_continue_when_health_ejects_it() -> None:
    """A replica that hangs (its relay frozen) is no dead connection: nothing fails until health
    ejects it, and the ejection carries its streams on to the other replica."""
    sim = {"gen_token_s": GEN_TOKEN_S}
    async with run_stack(2, sim=sim, relays=True, **NO_SPILL) as stack:
        seen = [Stream() for _ in range(8)]
        tasks = [
            asyncio.create_task(read_stream(stack.session, stack.proxy_url, "/v1/completions",
                                            completion_body(i), s))
            for i, s in enumerate(seen)
        ]  # fmt: skip
        await wait_for(lambda: all(len(s.chunks) >= 2 for s in seen), BOUND_S, "first tokens")
        busy = [stack.pool.get(link.url.split("//", 1)[1]) for link in stack.relays]
        hung = next(i for i, replica in enumerate(busy) if replica is not None and replica.inflight)
        stack.relays[hung].freeze()
        done = await asyncio.wait_for(asyncio.gather(*tasks), BOUND_S)
        other = stack.relays[1 - hung].url.split("//", 1)[1]
        for s in done:
            assert s.done, s.error
            assert len(s.ids) == MAX_TOKENS
            assert piece_ids(s.text) == s.ids
            assert announced(s)[0] == other
        stack.relays[hung].thaw()
