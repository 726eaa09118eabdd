"""The route table: every path the proxy answers, and the handler behind it.

Only an allowlist of vLLM's public routes is registered, and the adapter receiver's (a relay
pushes adapters into this proxy as into a replica); anything else (vLLM's dev-mode control
routes included) is answered 404 by aiohttp.
"""

from __future__ import annotations

from aiohttp import web

from adapter_receiver.wire import PREFIX as RECEIVER_PREFIX
from proxy.http import responses
from proxy.http.admin import Admin
from proxy.http.handlers import Handlers
from proxy.http.receiver import ReceiverRoutes

PASSTHROUGH_GET = ("/version", "/get_world_size", "/ping")
PASSTHROUGH_POST = ("/tokenize", "/detokenize", "/ping")
CONTROL = ("/pause", "/resume", "/reset_prefix_cache")


def add_routes(
    app: web.Application, h: Handlers, admin: Admin, receiver: ReceiverRoutes | None = None
) -> None:
    g = h.guarded
    router = app.router
    if receiver is not None:  # a relay in front of this proxy pushes adapters here
        router.add_get(RECEIVER_PREFIX, g("adapter_store", receiver.listing))
        router.add_put(RECEIVER_PREFIX + "/{name}", g("adapter_upload", receiver.upload))
    router.add_post("/v1/completions", g("completions", h.generation("completions", b"prompt")))
    router.add_post(
        "/v1/chat/completions",
        g("chat_completions", h.generation("chat_completions", b"messages")),
    )
    # Token-in generation (vLLM with --enable-scale-out): routed like completions.
    router.add_post("/inference/v1/generate", g("generate", h.generation("generate", b"token_ids")))
    router.add_post("/v1/load_lora_adapter", g("load_lora_adapter", h.load))
    router.add_post("/v1/unload_lora_adapter", g("unload_lora_adapter", h.unload))
    for path in CONTROL:
        router.add_post(path, g(path.lstrip("/"), h.control))
    router.add_get("/health", g("health", h.health, open_route=True))
    router.add_get("/server_info", g("server_info", h.server_info))
    router.add_get("/v1/models", g("models", h.models))
    router.add_get("/metrics", g("metrics", h.metrics_page))
    router.add_get("/proxy/status", g("status", h.status))
    for path in PASSTHROUGH_GET:
        router.add_get(path, g("passthrough", h.passthrough))
    for path in PASSTHROUGH_POST:
        router.add_post(path, g("passthrough", h.passthrough))
    for route in admin.routes():  # the admin API checks its own key
        assert isinstance(route, web.RouteDef)
        handler = g("admin", route.handler, open_route=True)
        web.RouteDef(route.method, route.path, handler, route.kwargs).register(router)
    known = frozenset(
        info["path"] for resource in router.resources() if "path" in (info := resource.get_info())
    )

    async def not_found(request: web.Request) -> web.StreamResponse:
        """Every other path (405 for a known path asked with another method)."""
        return responses.not_found(request.path in known, request.method)

    # Last, so it only catches what no route above takes (aiohttp tries resources in order).
    router.add_route("*", "/{tail:.*}", g("not_found", not_found, open_route=True))
