"""The handlers: read, classify, delegate, answer. One set for every scope.

Route classes: generation (routed to one replica), adapters (the whole fleet), control (TRL's
pause and resume, answered; a cache reset fanned out), aggregated (answered from the fleet's
state), passthrough (an allowlist of vLLM's public routes, to one healthy replica), and the
proxy's own ``/metrics`` and ``/proxy/status``. Each reads its request's scope (``edge.SCOPE``):
under ``/runs/<run>/`` a model or adapter name is the run's own and is scoped to the replicas'
(``proxy.runs.scope``); a generation request waits at the run's pause gate; a load past the
run's share of ``max_loras`` is refused before any replica sees it; ``/v1/models`` lists the run's
adapters under its own names, ``/server_info`` reports its share. Services return outcomes or
raise domain errors (``proxy.errors``); the handlers raise their own refusals
(``proxy.http.refusals``) the same way, all answered by the edge's one table
(``proxy.http.errors``); outcomes are turned into answers through ``proxy.http.responses``.
Bodies are read by the one reader (``proxy.http.bodies``).
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import web
from aiohttp.typedefs import Handler

from proxy.adapters.attest.probe import Captured
from proxy.adapters.calls import LoadRequest, parse_load, parse_unload
from proxy.adapters.service import AdapterService
from proxy.dataplane.fanout import PAUSE_MODES, FanOut
from proxy.dataplane.forward import Forwarder
from proxy.dataplane.resumable import Resumable
from proxy.fleet import views
from proxy.fleet.pool import ReplicaPool
from proxy.http import responses
from proxy.http.bodies import BodyReader
from proxy.http.edge import SCOPE
from proxy.http.identity import IDENTITY
from proxy.http.refusals import BadPauseMode, NotReported, UnsafeRequest
from proxy.http.responses import Redactor, json_response
from proxy.http.server import Guard
from proxy.http.status import Status
from proxy.insight.sampler import Sampler
from proxy.metrics.page import MetricsPage
from proxy.routing.facts import Facts
from proxy.routing.peek import Peek, peek_generation
from proxy.routing.policy import RouteRequest
from proxy.runs.names import canonical, splice_model
from proxy.runs.scope import Scope
from proxy.runs.table import OverShare, Runs

ROUTING_KEY_HEADERS = ("X-Routing-Key", "X-Session-ID")


def _printable_ascii(text: str) -> bool:
    return text.isascii() and text.isprintable()


def _check_passable(request: web.Request) -> None:
    """``UnsafeRequest`` for a request the proxy cannot pass on as it came: a non-ASCII request
    target or Content-Type (they are forwarded verbatim), or a routing key that is not printable
    text."""
    if not _printable_ascii(request.rel_url.raw_path_qs):
        raise UnsafeRequest("the request target must be printable ASCII (percent-encode)")
    content_type = request.headers.get("Content-Type", "")
    if not _printable_ascii(content_type):
        raise UnsafeRequest("the Content-Type header must be printable ASCII")
    for name in ROUTING_KEY_HEADERS:
        value = request.headers.get(name)
        if value is not None and not value.isprintable():
            raise UnsafeRequest(f"the {name} header must be printable text")


@dataclass(slots=True)
class Handlers:
    pool: ReplicaPool
    forwarder: Forwarder
    fanout: FanOut
    adapters: AdapterService
    facts: Facts
    status_of: Status
    redactor: Redactor
    bodies: BodyReader
    runs: Runs
    queue_timeout_s: float
    guard: Guard
    sampler: Sampler
    page: MetricsPage
    captured: Captured  # the policy probe's ids, taken from the first token-id prompt
    # -- bodies ------------------------------------------------------------------------------

    async def _with_body(
        self,
        request: web.Request,
        use: Callable[[web.Request, bytes], Awaitable[web.StreamResponse]],
        *,
        forwarded: bool = True,
    ) -> web.StreamResponse:
        """Read the body (``BodyReader.read``'s bounds), answer ``use(request, body)``, release
        the body after. ``forwarded``: the request goes to a replica as it came, so it must be
        passable (``_check_passable``)."""
        if forwarded:
            _check_passable(request)
        body = await self.bodies.read(request)
        try:
            return await use(request, body)
        finally:
            self.bodies.release(len(body))

    # -- generation and passthrough ------------------------------------------------------------

    def generation(self, route: str, prompt_key: bytes) -> Handler:
        async def generate(request: web.Request, body: bytes) -> web.StreamResponse:
            scope = request[SCOPE]
            headers = request.headers
            key = headers.get(ROUTING_KEY_HEADERS[0]) or headers.get(ROUTING_KEY_HEADERS[1])
            peek = peek_generation(body, prompt_key, self.facts.max_elements)
            if self.captured.ids is None and peek.kind == "tokens":  # once: the policy probe
                self.adapters.offer_probe(peek.buffer[peek.start : peek.end])
            if scope.run is not None:
                body, peek = self._scoped(scope, body, peek, prompt_key)
            facts = self.facts.from_peek(peek, key)  # UnknownModel: answered in the run's names
            if peek.stream:  # may be continued elsewhere if its replica fails mid-stream
                resume, body = self.forwarder.streams.plan(route, body)
                return await self._forward(request, body, route, facts, resume)
            return await self._forward(request, body, route, facts)

        async def handle(request: web.Request) -> web.StreamResponse:
            scope = request[SCOPE]
            if scope.run is not None:  # the bare path has no gate: no await on the hot path
                await scope.admitted(self.queue_timeout_s)
            return await self._with_body(request, generate)

        return handle

    def _scoped(self, scope: Scope, body: bytes, peek: Peek, key: bytes) -> tuple[bytes, Peek]:
        """A run's request with its ``model`` (any but the base) as the replicas name it: a
        splice of the bytes the peek indexed (the prompt's span shifted if the model came
        first), else a canonical rewrite and a new peek (rare)."""
        model = peek.model
        if model is None or any(r.base_model == model for r in self.pool):
            return body, peek
        new = scope.replica_name(model)
        found = splice_model(body, model, new, (peek.start, peek.end))
        if peek.buffer is not body or found is None:
            rewritten = canonical(body, new)
            return rewritten, peek_generation(rewritten, key, self.facts.max_elements)
        spliced, at, delta = found
        shift = delta if at < peek.start else 0
        start, end = peek.start + shift, peek.end + shift
        return spliced, dataclasses.replace(peek, model=new, buffer=spliced, start=start, end=end)

    async def _forward(
        self,
        request: web.Request,
        body: bytes,
        route: str,
        facts: RouteRequest,
        resume: Resumable | None = None,
    ) -> web.StreamResponse:
        run = request[SCOPE].run
        if run is None:  # the bare path: the request's own target, the bare path's slots
            return await self.forwarder.forward(
                request, route, body, facts, request[IDENTITY], resume=resume
            )
        target = request.rel_url.raw_path_qs.removeprefix(f"/runs/{run.name}")
        return await self.forwarder.forward(
            request, route, body, facts, request[IDENTITY], target, run.name, resume
        )

    async def passthrough(self, request: web.Request) -> web.StreamResponse:
        async def forward(request: web.Request, body: bytes) -> web.StreamResponse:
            return await self._forward(request, body, "passthrough", RouteRequest(None))

        return await self._with_body(request, forward)

    # -- adapters --------------------------------------------------------------------------

    async def load(self, request: web.Request) -> web.StreamResponse:
        async def load(request: web.Request, body: bytes) -> web.StreamResponse:
            scope = request[SCOPE]
            asked = parse_load(body)
            self._check_share(scope, asked.name)
            load = LoadRequest(scope.replica_name(asked.name), asked.path)
            result = await self.adapters.load(load)
            return self._own(scope, self.redactor.load_answer(result))

        return await self._with_body(request, load, forwarded=False)

    def _check_share(self, scope: Scope, name: str) -> None:
        """``OverShare`` when loading ``name`` would exceed the run's share of ``max_loras``."""
        max_loras, run = self.adapters.registry.max_loras, scope.run
        if max_loras is None or run is None:
            return
        share = self.runs.share(run.name, max_loras)
        held = [n for n in self.status_of.held(run.name) if n != scope.replica_name(name)]
        if len(held) + 1 > share:
            raise OverShare(
                f"run {run.name} holds {len(held)} adapters and its share of max_loras is "
                f"{share} ({max_loras} per replica over {len(self.runs)} runs by weight): unload "
                "one first (TRL: a lower --max-staleness), or start the replicas with a larger "
                "--max-loras"
            )

    async def unload(self, request: web.Request) -> web.StreamResponse:
        async def unload(request: web.Request, body: bytes) -> web.StreamResponse:
            scope = request[SCOPE]
            result = await self.adapters.unload(scope.replica_name(parse_unload(body)))
            return self._own(scope, responses.unload_answer(result))

        return await self._with_body(request, unload, forwarded=False)

    @staticmethod
    def _own(scope: Scope, response: web.Response) -> web.Response:
        if isinstance(response.body, bytes):
            response.body = scope.answer(response.body)
        return response

    # -- control ---------------------------------------------------------------------------

    async def control(self, request: web.Request) -> web.StreamResponse:
        _check_passable(request)
        path = request[SCOPE].target(request.path)
        mode = request.rel_url.query.get("mode", "abort")
        if path == "/pause" and mode not in PAUSE_MODES:
            raise BadPauseMode(PAUSE_MODES)
        run = request[SCOPE].run
        if run is not None:  # that run's gate only: the replicas and the other runs go on
            run.pause() if path == "/pause" else run.resume()
            status = "paused" if path == "/pause" else "resumed"
            return json_response(200, {"status": status, "run": run.name, "fleet": "generating"})
        query = request.rel_url.raw_query_string
        if self.fanout.answers(path):
            self.fanout.answer(path, query)
            return responses.answered(path)
        outcomes = await self.fanout.control(path, query)
        return self.redactor.control_answer(path, outcomes)

    # -- aggregated views ------------------------------------------------------------------

    async def health(self, request: web.Request) -> web.StreamResponse:
        status, body = views.health(self.pool)
        return json_response(status, body)

    async def server_info(self, request: web.Request) -> web.StreamResponse:
        info = views.server_info(self.pool)
        if info is None:
            raise NotReported("reported its server info")
        run = request[SCOPE].run
        if run is not None:  # the run's share of max_loras: what TRL checks its staleness on
            info = copy.deepcopy(info)
            config = info.get("vllm_config")
            lora = config.get("lora_config") if isinstance(config, dict) else None
            if isinstance(lora, dict) and isinstance(lora.get("max_loras"), int):
                lora["max_loras"] = self.runs.share(run.name, lora["max_loras"])
        return json_response(200, info)

    async def models(self, request: web.Request) -> web.StreamResponse:
        listing = views.models(self.pool, self.adapters.roots())
        if listing is None:
            raise NotReported("listed its models")
        scope = request[SCOPE]
        if scope.run is not None:  # the base model, then the run's adapters under its names
            data: list[dict[str, Any]] = [listing["data"][0]]
            for entry in listing["data"][1:]:
                own = scope.own_name(str(entry.get("id")))
                if own is not None:
                    data.append({**entry, "id": own})
            listing = {**listing, "data": data}
        return json_response(200, listing)

    async def metrics_page(self, request: web.Request) -> web.StreamResponse:
        return web.Response(
            body=self.page.render(),
            headers={"Content-Type": "text/plain; version=0.0.4; charset=utf-8"},
        )

    async def status(self, request: web.Request) -> web.StreamResponse:
        sampler = self.sampler
        page = self.status_of.page(
            sampler.advice(),
            sampler.run_advice(),
            client_connections=self.guard.connections,
            body_bytes_held=self.bodies.budget.held,
        )
        return json_response(200, page)
