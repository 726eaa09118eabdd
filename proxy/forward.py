"""The only code that sends client traffic upstream.

For one request: take a slot on a replica chosen by the routing policy, send the original body
bytes, and copy the answer back.
- A body with a Content-Length is read whole and sent to the client in one write; anything else
  (server-sent events, chunked) is copied chunk by chunk as it arrives.
- Failover: a transport failure before anything reached the client (connect refused, reset, a
  connection dropped while a buffered body was still arriving) ejects the replica and retries on
  another one, up to ``max_attempts`` replicas. After the first byte reached the client, the
  client connection is closed without a clean end, so the client sees the answer is incomplete.
- The slot is held until the response has been fully written or the client has gone. When the
  client goes (aiohttp cancels the handler), the upstream request is closed, which cancels the
  generation on the replica.
"""

from __future__ import annotations

import contextlib
import logging
import re
import time
from collections.abc import Iterator
from typing import Protocol

from aiohttp import web

from proxy.client import UpstreamClient
from proxy.connection import Connection, ConnectTimeout, WireError
from proxy.errors import error_response
from proxy.limiter import Limiter
from proxy.metrics import Metrics
from proxy.routing import Decision, Policy, RouteRequest, Snapshot
from proxy.upstreams import Health, Replica, ReplicaPool

log = logging.getLogger("proxy.forward")

_USAGE_PROMPT = re.compile(rb'"prompt_tokens"\s*:\s*([0-9]+)')
_USAGE_CACHED = re.compile(rb'"cached_tokens"\s*:\s*([0-9]+)')
_PASS_HEADERS = (("Content-Type", "content-type"), ("Content-Encoding", "content-encoding"))
REPLICA_HEADER = "X-Rollout-Replica"
ROUTE_HEADER = "X-Rollout-Route"  # the routing decision's reason


class OutOfStep(Protocol):
    def out_of_step(self, replica: Replica, name: str) -> None: ...


class _Failed(Exception):
    """This attempt failed before the client saw a byte; another replica may be tried.

    ``answer`` is the replica's own (5xx) answer, given to the client if no replica does better.
    """

    def __init__(self, reason: str, answer: web.Response | None = None) -> None:
        super().__init__(reason)
        self.answer = answer


class Forwarder:
    def __init__(
        self,
        pool: ReplicaPool,
        client: UpstreamClient,
        limiter: Limiter,
        policy: Policy,
        metrics: Metrics,
        adapters: OutOfStep,
    ) -> None:
        self._adapters = adapters
        self._pool = pool
        self._client = client
        self._limiter = limiter
        self._policy = policy
        self._metrics = metrics
        self._attempts = client.settings.max_attempts

    def _decide(self, route: RouteRequest, tried: set[str]) -> Decision | None:
        cap = self._limiter.per_replica
        candidates = [r for r in self._eligible(route.model, tried) if r.inflight < cap]
        if not candidates:
            return None
        return self._policy.select(Snapshot(candidates, self._pool.ids), route)

    def _eligible(self, model: str | None, tried: set[str]) -> Iterator[Replica]:
        """Routable replicas not tried yet that serve ``model`` (or have not listed models)."""
        for r in self._pool.routable():
            if r.id not in tried and (model is None or r.base_model is None or r.serves(model)):
                yield r

    async def forward(
        self, request: web.Request, route_name: str, body: bytes, route: RouteRequest
    ) -> web.StreamResponse:
        started = time.perf_counter()
        tried: set[str] = set()
        errors: list[str] = []
        path_qs = request.rel_url.raw_path_qs
        content_type = request.headers.get("Content-Type", "application/json")
        chosen: list[Decision] = []

        def pick() -> Replica | None:
            decision = self._decide(route, tried)
            if decision is None:
                return None
            chosen.append(decision)
            return self._pool.get(decision.replica_id)

        last_answer: web.Response | None = None
        for _ in range(self._attempts):
            if tried and next(self._eligible(route.model, tried), None) is None:
                break
            replica = await self._limiter.acquire(pick)
            reason = chosen[-1].reason
            chosen.clear()
            self._metrics.record_decision(reason)
            try:
                return await self._attempt(
                    request,
                    route_name,
                    replica,
                    reason,
                    route.model,
                    path_qs,
                    body,
                    content_type,
                    started,
                )
            except _Failed as exc:
                tried.add(replica.id)
                errors.append(f"{replica.id}: {exc}")
                last_answer = exc.answer or last_answer
                self._metrics.record_failover()
            finally:
                self._limiter.release(replica)
        if last_answer is not None:
            await last_answer.prepare(request)
            await last_answer.write_eof()
            return last_answer
        self._metrics.record_rejection("upstream_failed")
        return error_response(
            502,
            "no replica could answer: " + "; ".join(errors or ["no eligible replica"]),
            headers={"Retry-After": "1"},
        )

    async def _attempt(
        self,
        request: web.Request,
        route_name: str,
        replica: Replica,
        reason: str,
        model: str | None,
        path_qs: str,
        body: bytes,
        content_type: str,
        started: float,
    ) -> web.StreamResponse:
        sent = time.perf_counter()
        try:
            async with self._client.pool.request(
                replica.url, request.method, path_qs, body, content_type
            ) as upstream:
                ttfb = time.perf_counter()
                status = upstream.status
                headers = _response_headers(upstream.headers, replica, reason)
                if upstream.content_length is not None:
                    data = await upstream.read()
                    done = time.perf_counter()
                    if status == 404 and self._lost_adapter(replica, model, data):
                        raise _Failed(f"replica no longer has {model}")
                    answer = web.Response(status=status, body=data, headers=headers)
                    if status >= 500:
                        self._server_error(replica, status)
                        raise _Failed(f"answered HTTP {status}", answer)
                    replica.error_streak = 0
                    response: web.StreamResponse = answer
                    with contextlib.suppress(ConnectionError):  # the client has gone
                        await response.prepare(request)
                        await response.write_eof()
                    self._usage(data)
                else:
                    response, done = await self._stream(request, upstream, headers, replica)
        except ConnectTimeout as exc:
            self._eject(replica, "connect_timeout", exc)
            raise _Failed("connect timed out") from None
        except TimeoutError:
            self._metrics.record_replica_error(replica.id, "timeout")
            return error_response(
                504,
                f"replica {replica.id} did not answer within "
                f"{self._client.settings.request_timeout_s:g} s",
            )
        except WireError as exc:
            self._eject(replica, "transport", exc)
            raise _Failed(f"{type(exc).__name__}: {exc}") from None
        finished = time.perf_counter()
        overhead = (finished - started) - (done - sent)
        self._metrics.record_upstream(route_name, replica.id, ttfb - sent, max(overhead, 0.0))
        return response

    async def _stream(
        self,
        request: web.Request,
        upstream: Connection,
        headers: dict[str, str],
        replica: Replica,
    ) -> tuple[web.StreamResponse, float]:
        response = web.StreamResponse(status=upstream.status, headers=headers)
        try:
            await response.prepare(request)
            async for chunk in upstream.chunks():
                await response.write(chunk)
        except ConnectionError:
            # The client has gone. Leaving with the answer unread closes the upstream request,
            # which cancels the generation on the replica; the replica did nothing wrong.
            return response, time.perf_counter()
        except (WireError, TimeoutError) as exc:
            # The client already has part of the answer: no failover. Close the connection
            # without the terminating chunk so the client knows the answer is incomplete.
            if isinstance(exc, TimeoutError):  # slow, not gone: counted, not ejected
                self._metrics.record_replica_error(replica.id, "timeout")
            else:
                self._eject(replica, "midstream", exc)
            log.warning("replica %s failed mid-stream: %s", replica.id, exc)
            if request.transport is not None:
                request.transport.close()
            return response, time.perf_counter()
        done = time.perf_counter()
        with contextlib.suppress(ConnectionError):  # the client has gone
            await response.write_eof()
        return response, done

    def _server_error(self, replica: Replica, status: int) -> None:
        """Count a 5xx; ``breaker_failures`` in a row open the circuit (eject, cool down)."""
        self._metrics.record_replica_error(replica.id, "5xx")
        replica.error_streak += 1
        settings = self._client.settings
        if replica.error_streak >= settings.breaker_failures and replica.health is Health.HEALTHY:
            log.warning(
                "replica %s: %d server errors in a row (last HTTP %d): circuit open for %g s",
                replica.id,
                replica.error_streak,
                status,
                settings.breaker_cooldown_s,
            )
            replica.cooldown_until = time.monotonic() + settings.breaker_cooldown_s
            replica.error_streak = 0
            self._metrics.record_ejection("circuit")
            self._pool.set_health(replica, Health.EJECTED, f"circuit open after HTTP {status}s")
            replica.ok_streak = 0

    def _lost_adapter(self, replica: Replica, model: str | None, data: bytes) -> bool:
        """vLLM's "model does not exist" for an adapter the replica was believed to hold: it
        restarted unseen. Mark it out of step (reconciled in the background) and fail over."""
        if model is None or model not in replica.adapters or b"does not exist" not in data:
            return False
        self._metrics.record_replica_error(replica.id, "lost_adapter")
        self._adapters.out_of_step(replica, model)
        return True

    def _eject(self, replica: Replica, kind: str, exc: BaseException) -> None:
        self._metrics.record_replica_error(replica.id, kind)
        if replica.health is Health.HEALTHY:
            log.warning("replica %s ejected: %s (%s)", replica.id, kind, type(exc).__name__)
            self._metrics.record_ejection(kind)
            self._pool.set_health(replica, Health.EJECTED, f"{kind}: {type(exc).__name__}")
            replica.ok_streak = 0

    def _usage(self, data: bytes) -> None:
        tail = data[-600:]
        prompt = _USAGE_PROMPT.search(tail)
        if prompt is not None:
            cached = _USAGE_CACHED.search(tail)
            self._metrics.record_usage(int(prompt[1]), int(cached[1]) if cached else 0)


def _response_headers(upstream: dict[str, str], replica: Replica, reason: str) -> dict[str, str]:
    headers = {REPLICA_HEADER: replica.id, ROUTE_HEADER: reason}
    for name, key in _PASS_HEADERS:
        value = upstream.get(key)
        if value is not None:
            headers[name] = value
    return headers
