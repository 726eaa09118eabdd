"""The route table: every path the proxy answers, and the handler behind it, one table for the
bare path and for each run under ``/runs/{run}`` (the edge gives each route its scope).

Only an allowlist of vLLM's public routes is registered, and the adapter receiver's (a relay
pushes adapters into this proxy as into a replica); anything else (vLLM's dev-mode control
routes included) is answered 404 (``UnknownRoute``; 405, ``WrongMethod``, for a path served
with another method). A few routes are the bare path's alone: the cache reset (it would touch
every run's requests), the POST passthroughs (their ``model`` is not scoped) and the admin API
(its own key).
"""

from __future__ import annotations

from dataclasses import dataclass

from aiohttp import web
from aiohttp.typedefs import Handler

from adapter_receiver.wire import PREFIX as RECEIVER_PREFIX
from proxy.http.admin import Admin
from proxy.http.edge import Edge, RouteInfo
from proxy.http.handlers import Handlers
from proxy.http.receiver import ReceiverRoutes
from proxy.http.refusals import UnknownRoute, WrongMethod
from proxy.http.run_admin import RunAdmin
from proxy.http.scaler_admin import ScalerAdmin
from proxy.runs.run import PREFIX as RUN_PREFIX

PASSTHROUGH_GET = ("/version", "/get_world_size", "/ping")
PASSTHROUGH_POST = ("/tokenize", "/detokenize", "/ping")
GENERATION = (
    ("/v1/completions", "completions", b"prompt"),
    ("/v1/chat/completions", "chat_completions", b"messages"),
    # Token-in generation (vLLM with --enable-scale-out): routed like completions.
    ("/inference/v1/generate", "generate", b"token_ids"),
)


@dataclass(frozen=True, slots=True)
class Route:
    method: str
    path: str
    label: str  # the request metrics' ``route``
    handler: Handler
    open: bool = False  # no API key (the admin API checks its own)
    runs: bool = True  # also under /runs/{run}


def table(h: Handlers, receiver: ReceiverRoutes) -> list[Route]:
    routes = [
        Route("GET", RECEIVER_PREFIX, "adapter_store", receiver.listing),
        Route("PUT", RECEIVER_PREFIX + "/{name}", "adapter_upload", receiver.upload),
        *(Route("POST", path, label, h.generation(label, key)) for path, label, key in GENERATION),
        Route("POST", "/v1/load_lora_adapter", "load_lora_adapter", h.load),
        Route("POST", "/v1/unload_lora_adapter", "unload_lora_adapter", h.unload),
        Route("POST", "/pause", "pause", h.control),
        Route("POST", "/resume", "resume", h.control),
        Route("POST", "/reset_prefix_cache", "reset_prefix_cache", h.control, runs=False),
        Route("GET", "/health", "health", h.health, open=True),
        Route("GET", "/server_info", "server_info", h.server_info),
        Route("GET", "/v1/models", "models", h.models),
        Route("GET", "/metrics", "metrics", h.metrics_page),
        # The trainer reads the fleet's figures here (``trainer_entry.proxy_figures``).
        Route("GET", "/proxy/status", "status", h.status),
    ]
    routes += [Route("GET", path, "passthrough", h.passthrough) for path in PASSTHROUGH_GET]
    routes += [
        Route("POST", path, "passthrough", h.passthrough, runs=False) for path in PASSTHROUGH_POST
    ]
    return routes


def add_routes(
    app: web.Application,
    h: Handlers,
    admins: tuple[Admin, RunAdmin, ScalerAdmin],
    receiver: ReceiverRoutes,
    edge: Edge,
) -> None:
    """Every route; ``admins``: the admin API's replicas, runs and scaler routes, each behind
    the admin key (the first's ``guard``)."""
    router = app.router
    admin, run_admin, scaler_admin = admins
    tables = (admin.routes_table(), run_admin.routes_table(), scaler_admin.routes_table())
    admin_routes = [
        Route(method, path, "admin", admin.guard(handler), open=True, runs=False)
        for table_ in tables
        for method, path, handler in table_
    ]
    for route in [*table(h, receiver), *admin_routes]:
        for prefix in ("", RUN_PREFIX) if route.runs else ("",):
            served = edge.wrap(route.handler, RouteInfo(route.label, route.open, prefix != ""))
            resource = router.add_resource(prefix + route.path)
            if route.method == "GET":  # HEAD too, as aiohttp's add_get
                resource.add_route("HEAD", served)
            resource.add_route(route.method, served)
    known = frozenset(
        info["path"] for resource in router.resources() if "path" in (info := resource.get_info())
    )

    async def not_found(request: web.Request) -> web.StreamResponse:
        """Every other path (405 for a known path asked with another method)."""
        if request.path in known:
            raise WrongMethod(request.method)
        raise UnknownRoute

    # Last, so it only catches what no route above takes (aiohttp tries resources in order).
    router.add_route("*", "/{tail:.*}", edge.wrap(not_found, RouteInfo("not_found", open=True)))
