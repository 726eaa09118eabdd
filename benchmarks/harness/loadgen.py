"""A closed-loop GRPO load generator: groups of G rollouts, multi-turn, fixed concurrency.

At most ``concurrency`` requests are in flight (a semaphore), like TRL's rollout worker with
``max_inflight_tasks``. Each group sends its G rollouts back to back; each rollout runs its turns
in order. Every request's latency, status, replica (from the proxy's debug header) and usage are
recorded for the report.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import orjson

from benchmarks.harness.trace import Group, TraceShape, build_groups, next_prompt

REPLICA_HEADER = "X-Rollout-Replica"


@dataclass(slots=True)
class Sample:
    latency_s: float
    status: int
    replica: str
    prompt_tokens: int
    cached_tokens: int


@dataclass(slots=True)
class LoadResult:
    samples: list[Sample] = field(default_factory=list)
    started: float = 0.0
    finished: float = 0.0
    errors: list[str] = field(default_factory=list)

    @property
    def wall_s(self) -> float:
        return self.finished - self.started


class LoadGenerator:
    def __init__(
        self,
        base_url: str,
        shape: TraceShape,
        *,
        model: str,
        concurrency: int = 64,
        headers: dict[str, str] | None = None,
    ) -> None:
        self._url = base_url.rstrip("/") + "/v1/completions"
        self._shape = shape
        self._model = model
        self._limit = asyncio.Semaphore(concurrency)
        self._headers = {"Content-Type": "application/json", **(headers or {})}
        self._on_progress: Callable[[int], None] | None = None
        self.result = LoadResult()

    @property
    def total_requests(self) -> int:
        return self._shape.prompts * self._shape.group_size * self._shape.turns

    async def run_with(self, on_progress: Callable[[int], None]) -> LoadResult:
        """``run``, calling ``on_progress(requests done)`` after each answer."""
        self._on_progress = on_progress
        return await self.run()

    async def run(self) -> LoadResult:
        connector = aiohttp.TCPConnector(limit=0)
        timeout = aiohttp.ClientTimeout(total=600)
        async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
            self.result.started = time.perf_counter()
            groups = build_groups(self._shape)
            await asyncio.gather(*(self._group(session, group) for group in groups))
            self.result.finished = time.perf_counter()
        return self.result

    async def _group(self, session: aiohttp.ClientSession, group: Group) -> None:
        await asyncio.gather(
            *(self._rollout(session, group, i) for i in range(self._shape.group_size))
        )

    async def _rollout(self, session: aiohttp.ClientSession, group: Group, index: int) -> None:
        prompt = group.first_prompt(index)
        for turn in range(self._shape.turns):
            answer = await self._request(session, prompt, seed=group.index * 1000 + index)
            if answer is None:
                return
            if turn + 1 < self._shape.turns:
                prompt = next_prompt(prompt, answer, group.follow_ups[turn])

    async def _request(
        self, session: aiohttp.ClientSession, prompt: list[int], seed: int
    ) -> list[int] | None:
        body = orjson.dumps({
            "model": self._model,
            "prompt": prompt,
            "max_tokens": self._shape.max_tokens,
            "temperature": 1.0,
            "n": 1,
            "seed": seed,
            "return_token_ids": True,
            "logprobs": 0,
        })  # fmt: skip
        async with self._limit:
            started = time.perf_counter()
            try:
                async with session.post(self._url, data=body, headers=self._headers) as resp:
                    data = await resp.read()
                    status, replica = resp.status, resp.headers.get(REPLICA_HEADER, "?")
            except (aiohttp.ClientError, TimeoutError) as exc:
                self.result.errors.append(type(exc).__name__)
                return None
            latency = time.perf_counter() - started
        answer, prompt_tokens, cached = _parse(data) if status == 200 else (None, 0, 0)
        self.result.samples.append(Sample(latency, status, replica, prompt_tokens, cached))
        if status != 200:
            self.result.errors.append(f"HTTP {status}")
        if self._on_progress is not None:
            self._on_progress(len(self.result.samples))
        return answer


def _parse(data: bytes) -> tuple[list[int] | None, int, int]:
    doc: Any = orjson.loads(data)
    usage = doc.get("usage") or {}
    details = usage.get("prompt_tokens_details") or {}
    answer = doc["choices"][0].get("token_ids")
    return answer, int(usage.get("prompt_tokens", 0)), int(details.get("cached_tokens") or 0)
