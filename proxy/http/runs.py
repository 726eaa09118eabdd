"""The routes under ``/runs/<run>/``: one proxy, several RL runs on one fleet, each isolated.

TRL is pointed at ``http://proxy:8000/runs/<run>`` and appends its paths as to any base URL
(trl 1.16's ``VLLMClient``), so TRL is unchanged. Per route:

- generation (completions, chat, token-in): held while the run is paused (its NEW requests
  only, at most the queue timeout, then 503); the ``model`` naming one of the run's adapters is
  spliced to the replicas' name (``proxy.runs.names``) into the bytes the routing peek located;
  a base-model request goes as it is (any other model is the run's). Routed as the bare path's;
  its slot is the run's (``proxy.dataplane.fair``: weighted shares when runs wait, its own
  share of the queue).
- load and unload: ``lora_name`` scoped to the run. A load that would make the run hold more
  adapters than its share of ``max_loras`` is refused (400 naming the run and the share) before
  anything reaches a replica. The answer reads with the run's own names.
- pause and resume: that run's gate only (``proxy.runs.table``); the replicas and the other runs
  are untouched, and the run's running requests go on.
- ``/v1/models``: the base model and the run's adapters under its own names; ``/server_info``:
  the fleet's, with ``max_loras`` the run's share (what TRL checks ``max_staleness`` against).
- ``/health``, ``/metrics``, ``/proxy/status`` and vLLM's public GETs: as on the bare path.
- the adapter receiver (a run's relay pushes into this proxy): its uploads stored under the
  run's names, so two runs' ``trl-policy-v1`` are two entries.

A run no one declared is answered 404 with the list of the declared ones. The admin API
(``--admin-key``) lists, declares, reweighs and removes runs while the proxy runs.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Awaitable, Callable

from aiohttp import web
from aiohttp.typedefs import Handler

from adapter_receiver.wire import PREFIX as RECEIVER_PREFIX
from proxy.adapters.calls import BadAdapterRequest, parse_adapter_request
from proxy.adapters.service import AdapterService
from proxy.dataplane.limiter import Limiter
from proxy.fleet import views
from proxy.fleet.pool import NoReplica
from proxy.http import responses
from proxy.http.admin import Admin
from proxy.http.handlers import ROUTING_KEY_HEADERS, Handlers
from proxy.http.receiver import ReceiverRoutes
from proxy.http.responses import error_response, json_response
from proxy.http.run_admin import RunAdmin
from proxy.insight.advisor import VERDICTS
from proxy.routing.facts import UnknownModel
from proxy.routing.peek import BadBody, Peek, peek_generation
from proxy.routing.policy import RouteRequest
from proxy.runs.names import (
    canonical,
    scope_adapter_body,
    scoped,
    splice_model,
    unscope_text,
    unscoped,
)
from proxy.runs.table import Run, Runs, RunView, UnknownRun

PREFIX = "/runs/{run}"
GENERATION = (
    ("/v1/completions", "completions", b"prompt"),
    ("/v1/chat/completions", "chat_completions", b"messages"),
    ("/inference/v1/generate", "generate", b"token_ids"),
)
PASSTHROUGH_GET = ("/version", "/get_world_size", "/ping")
RunHandler = Callable[[web.Request, Run], Awaitable[web.StreamResponse]]


def _plain(handler: Handler) -> RunHandler:
    """A bare path's handler under a run's path (the run only checked)."""

    async def plain(request: web.Request, run: Run) -> web.StreamResponse:
        return await handler(request)

    return plain


class RunRoutes:
    def __init__(
        self,
        h: Handlers,
        runs: Runs,
        adapters: AdapterService,
        queue_timeout_s: float,
        receiver: ReceiverRoutes,
        admin: Admin,
        limiter: Limiter,
    ) -> None:
        self.h, self.runs, self.adapters, self.receiver = h, runs, adapters, receiver
        self.admin, self.limiter = admin, limiter
        self.queue_timeout_s = queue_timeout_s
        h.metrics.read_runs(self.views, VERDICTS)
        h.runs_page = self.page

    def views(self) -> list[RunView]:
        max_loras = self.adapters.registry.max_loras
        sampler = self.h.sampler
        advice = {n: a.as_dict() for n, a in sampler.run_advice().items()} if sampler else {}
        return [
            RunView(
                run.name,
                run.weight,
                run.paused,
                run.pauses,
                len(self.held(run.name)),
                self.runs.share(run.name, max_loras) if max_loras is not None else None,
                run.requests,
                self.limiter.inflight_of(run.name),
                self.limiter.queued_of(run.name),
                advice.get(run.name),
            )
            for run in self.runs
        ]

    def page(self) -> dict[str, object]:
        """``/proxy/status``'s ``runs``: each declared run's state."""
        return {view.name: view.as_dict() for view in self.views()}

    def held(self, run: str) -> list[str]:
        """The run's adapters the fleet is to hold (replica-side names)."""
        registry = self.adapters.registry
        return [name for name in registry.versions if registry.scope_of(name) == run]

    # -- routes ------------------------------------------------------------------------------

    def add(self, app: web.Application) -> None:
        guarded, router = self.h.guarded, app.router

        def g(route: str, handler: RunHandler, *, open_route: bool = False) -> Handler:
            return guarded(route, self._in_run(handler), open_route=open_route)

        for path, route, key in GENERATION:
            router.add_post(PREFIX + path, g(route, self._generation(route, key)))
        router.add_post(PREFIX + "/v1/load_lora_adapter", g("load_lora_adapter", self.load))
        router.add_post(PREFIX + "/v1/unload_lora_adapter", g("unload_lora_adapter", self.unload))
        router.add_post(PREFIX + "/pause", g("pause", self.pause))
        router.add_post(PREFIX + "/resume", g("resume", self.resume))
        router.add_get(PREFIX + "/health", g("health", _plain(self.h.health), open_route=True))
        router.add_get(PREFIX + "/server_info", g("server_info", self.server_info))
        router.add_get(PREFIX + "/v1/models", g("models", self.models))
        for path in PASSTHROUGH_GET:
            router.add_get(PREFIX + path, g("passthrough", self.passthrough))
        router.add_get(PREFIX + "/metrics", g("metrics", _plain(self.h.metrics_page)))
        # The trainer reads the fleet's figures here (``trainer_entry.proxy_figures``).
        router.add_get(PREFIX + "/proxy/status", g("status", _plain(self.h.status)))
        # A run's relay pushes into this proxy's receiver, the entries under the run's names.
        store = PREFIX + RECEIVER_PREFIX
        router.add_get(store, g("adapter_store", _plain(self.receiver.listing)))
        router.add_put(store + "/{name}", g("adapter_upload", self.upload))
        # The admin API's runs (its key checked by ``Admin.guard``, as for replicas).
        run_admin = RunAdmin(
            self.runs, self.page, self.held, self.adapters, self.h.client.body_timeout_s
        )
        for method, path, handler in run_admin.routes_table():
            guard = self.admin.guard(handler)
            router.add_route(method, path, guarded("admin", guard, open_route=True))

    def _in_run(self, handler: RunHandler) -> Handler:
        """``handler`` given the request's run (404 naming the declared runs if it is none),
        each answer counted for its run."""

        async def in_run(request: web.Request) -> web.StreamResponse:
            name = request.match_info["run"]
            try:
                run = self.runs.get(name)
            except UnknownRun as exc:
                self.h.metrics.record_rejection("unknown_run")
                return error_response(404, str(exc), param="run")
            response = await handler(request, run)
            run.requests += 1
            return response

        return in_run

    @staticmethod
    def _target(request: web.Request, run: Run) -> str:
        """The path and query the replicas get: the request's, without ``/runs/<run>``."""
        return request.rel_url.raw_path_qs.removeprefix(f"/runs/{run.name}")

    def _generation(self, route: str, prompt_key: bytes) -> RunHandler:
        async def handle(request: web.Request, run: Run) -> web.StreamResponse:
            if not await run.admitted(self.queue_timeout_s):
                self.h.metrics.record_rejection("run_paused")
                return responses.rejected(
                    f"run {run.name} stayed paused for {self.queue_timeout_s:g} s (its weight "
                    "sync did not resume); retry shortly",
                    1,
                )
            return await self.h._with_body(request, self._generate, run, route, prompt_key)

        return handle

    async def _generate(
        self, request: web.Request, body: bytes, run: Run, route: str, prompt_key: bytes
    ) -> web.StreamResponse:
        h = self.h
        key = request.headers.get(ROUTING_KEY_HEADERS[0]) or request.headers.get(
            ROUTING_KEY_HEADERS[1]
        )
        try:
            peek = peek_generation(body, prompt_key, h.facts.max_elements)
            model = peek.model
            # Every model but the base is one of the run's adapters (one still being unloaded
            # behind TRL's answer is served until it is gone; one never loaded is vLLM's 404).
            if model is not None and not any(r.base_model == model for r in h.pool):
                body, peek = self._spliced(body, peek, scoped(run.name, model), prompt_key)
            facts = h.facts.from_peek(peek, key)
        except BadBody as exc:
            h.metrics.record_rejection("bad_request")
            return error_response(400, str(exc), param=exc.param)
        except UnknownModel as exc:
            h.metrics.record_rejection("unknown_model")
            return responses.model_not_found(unscoped(run.name, exc.model) or exc.model)
        return await h._forward(request, body, route, facts, self._target(request, run), run.name)

    def _spliced(self, body: bytes, peek: Peek, new: str, key: bytes) -> tuple[bytes, Peek]:
        """The body and its peek with ``model`` = ``new``: a splice of the original bytes when
        the peek indexed them (the prompt's span shifted if the model came before it), else the
        canonical rewrite and a new peek (rare)."""
        assert peek.model is not None
        found = splice_model(body, peek.model, new, (peek.start, peek.end))
        if peek.buffer is not body or found is None:
            rewritten = canonical(body, new)
            return rewritten, peek_generation(rewritten, key, self.h.facts.max_elements)
        spliced, at, delta = found
        shift = delta if at < peek.start else 0
        start, end = peek.start + shift, peek.end + shift
        return spliced, dataclasses.replace(peek, model=new, buffer=spliced, start=start, end=end)

    async def passthrough(self, request: web.Request, run: Run) -> web.StreamResponse:
        return await self.h._with_body(request, self._pass, run)

    async def _pass(self, request: web.Request, body: bytes, run: Run) -> web.StreamResponse:
        target = self._target(request, run)
        return await self.h._forward(
            request, body, "passthrough", RouteRequest(None), target, run.name
        )

    # -- adapters ----------------------------------------------------------------------------

    async def load(self, request: web.Request, run: Run) -> web.StreamResponse:
        return await self.h._with_body(request, self._load, run, forwarded=False)

    async def _load(self, request: web.Request, body: bytes, run: Run) -> web.StreamResponse:
        try:
            parse_adapter_request(body, need_path=True)
        except BadAdapterRequest as exc:
            return error_response(400, str(exc), param=exc.param)
        scoped_body, name = scope_adapter_body(body, run.name)
        refusal = self._over_share(run, scoped(run.name, name))
        if refusal is not None:
            self.h.metrics.record_rejection("run_share")
            return error_response(400, refusal, param="lora_name")
        try:
            result = await self.adapters.load(scoped_body)
        except BadAdapterRequest as exc:
            return error_response(400, str(exc), param=exc.param)
        except NoReplica:
            return responses.no_replica()
        return self._unscoped(self.h.redactor.load_answer(result), run)

    def _over_share(self, run: Run, name: str) -> str | None:
        """Why loading ``name`` would exceed the run's share of ``max_loras`` (None: it fits)."""
        max_loras = self.adapters.registry.max_loras
        if max_loras is None:
            return None
        share = self.runs.share(run.name, max_loras)
        held = [n for n in self.held(run.name) if n != name]
        if len(held) + 1 <= share:
            return None
        return (
            f"run {run.name} holds {len(held)} adapters and its share of max_loras is {share} "
            f"({max_loras} per replica over {len(self.runs)} runs by weight): unload one first "
            "(TRL: a lower --max-staleness), or start the replicas with a larger --max-loras"
        )

    async def upload(self, request: web.Request, run: Run) -> web.StreamResponse:
        # The answer names the entry's path, which the relay's load then sends: kept as it is.
        return await self.receiver.upload(request, scoped(run.name, request.match_info["name"]))

    async def unload(self, request: web.Request, run: Run) -> web.StreamResponse:
        return await self.h._with_body(request, self._unload, run, forwarded=False)

    async def _unload(self, request: web.Request, body: bytes, run: Run) -> web.StreamResponse:
        try:
            parse_adapter_request(body, need_path=False)
        except BadAdapterRequest as exc:
            return error_response(400, str(exc), param=exc.param)
        scoped_body, _ = scope_adapter_body(body, run.name)
        result = await self.adapters.unload(scoped_body)
        return self._unscoped(responses.unload_answer(result), run)

    @staticmethod
    def _unscoped(response: web.Response, run: Run) -> web.Response:
        if isinstance(response.body, bytes):
            response.body = unscope_text(response.body, run.name)
        return response

    # -- pause, views ------------------------------------------------------------------------

    async def pause(self, request: web.Request, run: Run) -> web.StreamResponse:
        run.pause()
        return json_response(200, {"status": "paused", "run": run.name, "fleet": "generating"})

    async def resume(self, request: web.Request, run: Run) -> web.StreamResponse:
        run.resume()
        return json_response(200, {"status": "resumed", "run": run.name, "fleet": "generating"})

    async def models(self, request: web.Request, run: Run) -> web.StreamResponse:
        listing = views.models(self.h.pool, self.adapters.roots())
        if listing is None:
            return responses.not_reported("listed its models")
        data = [listing["data"][0]]  # the base model
        for entry in listing["data"][1:]:
            own = unscoped(run.name, str(entry.get("id")))
            if own is not None:
                data.append({**entry, "id": own})
        return json_response(200, {**listing, "data": data})

    async def server_info(self, request: web.Request, run: Run) -> web.StreamResponse:
        info = views.server_info(self.h.pool)
        if info is None:
            return responses.not_reported("reported its server info")
        info = copy.deepcopy(info)
        config = info.get("vllm_config")
        lora = config.get("lora_config") if isinstance(config, dict) else None
        if isinstance(lora, dict) and isinstance(lora.get("max_loras"), int):
            lora["max_loras"] = self.runs.share(run.name, lora["max_loras"])
        return json_response(200, info)
