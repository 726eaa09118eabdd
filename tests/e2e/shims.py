"""A lying replica for the real tier: an HTTP front for one vLLM server that acknowledges every
adapter and answers every request for one with the base model, as a data-parallel deployment
that drops the adapter does (TRL #7017). The ``shim`` fixture (``conftest``) gives one and a
server to run it."""

from __future__ import annotations

import json
from collections import Counter

import aiohttp
from aiohttp import web

GENERATION = ("/v1/completions", "/v1/chat/completions")


class BaseShim:
    """An HTTP front for one vLLM server that rewrites the ``model`` of every generation
    request naming an adapter to the base model, and passes everything else through (loads,
    unloads, listings, adapter pushes). Counts what it rewrote: probes (top logprobs asked)
    and rollouts."""

    def __init__(self) -> None:
        self.upstream = ""
        self.base = ""
        self.probes: Counter[str] = Counter()  # by the adapter named
        self.rollouts: Counter[str] = Counter()
        self.app = web.Application(client_max_size=1 << 30)
        self.app.router.add_route("*", "/{tail:.*}", self._forward)

    async def _forward(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        if request.path in GENERATION and body:
            asked = json.loads(body)
            named = asked.get("model")
            if named not in (None, self.base):
                asked["model"] = self.base
                (self.probes if asked.get("logprobs") else self.rollouts)[named] += 1
                body = json.dumps(asked).encode()
        headers = {k: v for k, v in request.headers.items() if k.lower() not in SKIPPED}
        async with (
            aiohttp.ClientSession() as session,
            session.request(
                request.method, self.upstream + request.path_qs, data=body, headers=headers
            ) as answer,
        ):
            payload = await answer.read()
            kept = {k: v for k, v in answer.headers.items() if k.lower() not in SKIPPED}
            return web.Response(status=answer.status, body=payload, headers=kept)


SKIPPED = {"host", "content-length", "transfer-encoding", "connection", "content-encoding"}
