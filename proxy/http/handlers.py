"""The handlers: read, classify, delegate, answer. One set for every run.

Route classes: generation (routed to one replica), adapters (the whole fleet), control (TRL's
pause and resume, answered; a cache reset fanned out), aggregated (answered from the fleet's
state), passthrough (an allowlist of vLLM's public routes, to one healthy replica), and the
proxy's own ``/metrics`` and ``/proxy/status``. Each reads its request's run (``edge.RUN``: the
default run on the bare path, else the one declared under ``/runs/<run>/``) and asks it what
differs by run (``proxy.runs.run``): how a model or adapter name and the path look on the
replicas, whether a generation request waits at a pause gate, whether a load past the run's
share of ``max_loras`` is refused before any replica sees it, what ``/v1/models`` and
``/server_info`` show, what TRL's pause and resume do. Services return outcomes or
raise domain errors (``proxy.errors``); the handlers raise their own refusals
(``proxy.http.refusals``) the same way, all answered by the edge's one table
(``proxy.http.errors``); outcomes are turned into answers through ``proxy.http.responses``.
Bodies are read by the one reader (``proxy.http.bodies``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import web
from aiohttp.typedefs import Handler

from proxy.adapters.attest.probe import Captured
from proxy.adapters.calls import LoadRequest, adapter_name, parse_load, parse_unload
from proxy.adapters.service import AdapterService
from proxy.dataplane.fanout import PAUSE_MODES, FanOut
from proxy.dataplane.forward import Forwarder
from proxy.dataplane.resumable import Resumable
from proxy.fleet import views
from proxy.fleet.pool import ReplicaPool
from proxy.http import responses
from proxy.http.bodies import BodyReader
from proxy.http.edge import RUN
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
from proxy.runs.run import Run
from proxy.runs.table import OverShare

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


@dataclass(frozen=True, slots=True)
class FleetControl:
    """TRL's pause and resume as a run carries them out (``proxy.runs.run.Control``): the
    fleet's fan-out (or the proxy's own answer), or the run's own answer."""

    fanout: FanOut
    redactor: Redactor

    async def fan_out(self, path: str, query: str) -> web.StreamResponse:
        if self.fanout.answers(path):
            self.fanout.answer(path, query)
            return responses.answered(path)
        outcomes = await self.fanout.control(path, query)
        return self.redactor.control_answer(path, outcomes)

    def answer(self, payload: dict[str, Any]) -> web.StreamResponse:
        return json_response(200, payload)


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
    queue_timeout_s: float
    guard: Guard
    sampler: Sampler
    page: MetricsPage
    captured: Captured  # the policy probe's ids, taken from the first token-id prompt
    fleet_control: FleetControl  # what a run's pause and resume act through
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
            headers = request.headers
            key = headers.get(ROUTING_KEY_HEADERS[0]) or headers.get(ROUTING_KEY_HEADERS[1])
            peek = peek_generation(body, prompt_key, self.facts.max_elements)
            if self.captured.ids is None and peek.kind == "tokens":  # once: the policy probe
                self.adapters.offer_probe(peek.buffer[peek.start : peek.end])
            body, peek = self._renamed(request[RUN], body, peek, prompt_key)
            facts = self.facts.from_peek(peek, key)  # UnknownModel: answered in the run's names
            if peek.stream:  # may be continued elsewhere if its replica fails mid-stream
                resume, body = self.forwarder.streams.plan(route, body)
                return await self._forward(request, body, route, facts, resume)
            return await self._forward(request, body, route, facts)

        async def handle(request: web.Request) -> web.StreamResponse:
            gate = request[RUN].admission(self.queue_timeout_s)
            if gate is not None:  # a paused run's: an open gate costs no await
                await gate
            return await self._with_body(request, generate)

        return handle

    def _renamed(self, run: Run, body: bytes, peek: Peek, key: bytes) -> tuple[bytes, Peek]:
        """The request with its ``model`` (any but the base) as the replicas name it for
        ``run`` (the default run's are the replicas' own: nothing to do): a splice of the bytes
        the peek indexed (the prompt's span shifted if the model came first), else a canonical
        rewrite and a new peek (rare)."""
        model = peek.model
        if model is None:
            return body, peek
        new = run.replica_name(model)
        if new == model or any(r.base_model == model for r in self.pool):
            return body, peek
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
        run = request[RUN]
        target = run.target(request.rel_url.raw_path_qs)
        return await self.forwarder.forward(
            request, route, body, facts, request[IDENTITY], target, run, resume
        )

    async def passthrough(self, request: web.Request) -> web.StreamResponse:
        async def forward(request: web.Request, body: bytes) -> web.StreamResponse:
            return await self._forward(request, body, "passthrough", RouteRequest(None))

        return await self._with_body(request, forward)

    # -- adapters --------------------------------------------------------------------------

    async def load(self, request: web.Request) -> web.StreamResponse:
        async def load(request: web.Request, body: bytes) -> web.StreamResponse:
            run = request[RUN]
            asked = parse_load(body)
            name = adapter_name(run.replica_name(asked.name))  # a run's prefix counts too
            self._check_share(run, name)
            result = await self.adapters.load(LoadRequest(name, asked.path))
            return self._own(run, self.redactor.load_answer(result))

        return await self._with_body(request, load, forwarded=False)

    def _check_share(self, run: Run, name: str) -> None:
        """``OverShare`` when loading ``name`` (replica-side) would make ``run`` hold more
        adapters than it may (``Run.over_share``)."""
        max_loras = self.adapters.registry.max_loras
        if max_loras is None:
            return
        held = [n for n in self.status_of.held(run) if n != name]
        refused = run.over_share(len(held), max_loras)
        if refused is not None:
            raise OverShare(refused)

    async def unload(self, request: web.Request) -> web.StreamResponse:
        async def unload(request: web.Request, body: bytes) -> web.StreamResponse:
            run = request[RUN]
            name = adapter_name(run.replica_name(parse_unload(body)))
            result = await self.adapters.unload(name)
            return self._own(run, responses.unload_answer(result))

        return await self._with_body(request, unload, forwarded=False)

    @staticmethod
    def _own(run: Run, response: web.Response) -> web.Response:
        if isinstance(response.body, bytes):
            response.body = run.answer(response.body)
        return response

    # -- control ---------------------------------------------------------------------------

    async def control(self, request: web.Request) -> web.StreamResponse:
        _check_passable(request)
        run = request[RUN]
        path = run.target(request.path)
        mode = request.rel_url.query.get("mode", "abort")
        if path == "/pause" and mode not in PAUSE_MODES:
            raise BadPauseMode(PAUSE_MODES)
        query = request.rel_url.raw_query_string
        return await run.control(path, query, self.fleet_control)

    # -- aggregated views ------------------------------------------------------------------

    async def health(self, request: web.Request) -> web.StreamResponse:
        status, body = views.health(self.pool)
        return json_response(status, body)

    async def server_info(self, request: web.Request) -> web.StreamResponse:
        info = views.server_info(self.pool)
        if info is None:
            raise NotReported("reported its server info")
        return json_response(200, request[RUN].server_info(info))

    async def models(self, request: web.Request) -> web.StreamResponse:
        listing = views.models(self.pool, self.adapters.roots())
        if listing is None:
            raise NotReported("listed its models")
        return json_response(200, request[RUN].models(listing))

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
