"""The only code that sends client traffic upstream.

For one request: take a slot on a replica chosen by the routing policy, send the original body
bytes, and copy the answer back.
- A body with a Content-Length is read whole and sent to the client in one write; anything else
  (server-sent events, chunked) is copied chunk by chunk as it arrives.
- Failover: a transport failure before anything reached the client (connect refused, reset, a
  connection dropped while a buffered body was still arriving) ejects the replica and retries on
  another one, up to ``max_attempts`` replicas; so does the ejection of its replica, whatever
  the cause, while the attempt waits on it (``attempts``). After the first byte reached the
  client, a resumable stream is carried on by another replica (``migration``); any other answer
  is cut: its connection closed without a clean end, so the client sees it is incomplete.
- The slot is held until the response has been fully written or the client has gone. When the
  client goes (aiohttp cancels the handler), the upstream request is closed, which cancels the
  generation on the replica.
- When no replica answers, ``NoAnswer`` or ``AnswerTimeout`` is raised before anything was
  written; the HTTP edge turns it into the client's error answer. A local lack of resources
  (``LocalResourceError``: the proxy's own file descriptors) is raised as it is: no replica is
  blamed for it.
- HEAD (allowed on the pass-through GET routes) is forwarded as HEAD and answered with the
  replica's status and headers, without a body, as soon as its head arrives.
- Every answer names the replica that gave it (``X-Rollout-Replica``) and, for an adapter
  version, the policy: ``X-Rollout-Policy: <version>@<content digest>`` (what its agent checked).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Container, Iterator
from contextlib import AbstractContextManager
from typing import Any, Protocol

from aiohttp import web

from proxy.dataplane.answers import Answers, OutOfStep
from proxy.dataplane.attempts import EJECTED, Ejections
from proxy.dataplane.exchange import Busy, Exchange, Failed, Identity
from proxy.dataplane.failures import NoAnswer
from proxy.dataplane.headers import response_headers
from proxy.dataplane.ledger import StreamLedger
from proxy.dataplane.limiter import Limiter, Placement
from proxy.dataplane.migration import Cut, Migrations
from proxy.dataplane.resumable import Resumable
from proxy.errors import DomainError
from proxy.fleet.outliers import Outliers
from proxy.fleet.pool import ReplicaPool
from proxy.fleet.replica import Replica
from proxy.metrics.recorder import Metrics
from proxy.routing.cost import CostModel
from proxy.routing.policy import Policy, RouteRequest, Snapshot
from proxy.runs.run import DEFAULT, Run
from proxy.upstream.connpool import ConnectionPool
from proxy.upstream.errors import AnswerTimeout, ConnectTimeout, Dropped, WireError

log = logging.getLogger("proxy.forward")


class Tracing(Protocol):
    """Optional spans around the data plane's steps (``proxy.http.tracing.Spans``)."""

    def span(self, name: str, **attributes: Any) -> AbstractContextManager[Any]: ...


NO_IDENTITY = Identity("", b"")


class Forwarder:
    def __init__(
        self,
        pool: ReplicaPool,
        connections: ConnectionPool,
        limiter: Limiter,
        policy: Policy,
        metrics: Metrics,
        outliers: Outliers,
        adapters: OutOfStep,
        *,
        max_attempts: int,
        request_timeout_s: float,
        tracing: Tracing | None = None,
        costs: CostModel | None = None,
        max_stream_migrations: int = 0,
    ) -> None:
        self._answers = Answers(metrics, outliers, adapters, costs or CostModel())
        self._pool = pool
        self._connections = connections
        self._limiter = limiter
        self._policy = policy
        self._metrics = metrics
        self._outliers = outliers
        self._attempts = max_attempts
        self._timeout_s = request_timeout_s
        self._by_model: dict[str | None, int] = {}  # requests in flight, by the model asked for
        self._ejections = Ejections(pool, connections)  # fails over what an ejection strands
        self._tracing = tracing
        self.streams = Migrations(metrics, max_stream_migrations)

    def inflight_by_version(self, versions: Container[str]) -> dict[str, int]:
        """Requests in flight by adapter version (``versions``: the ones the proxy manages), the
        base model (``base``) and anything else (``other``): a fixed-size label set."""
        bases = {r.base_model for r in self._pool}
        out = {"base": 0, "other": 0}
        for model, count in self._by_model.items():
            if model is not None and model in versions:
                label = model
            else:
                label = "base" if model is None or model in bases else "other"
            out[label] = out.get(label, 0) + count
        return out

    def _place(self, route: RouteRequest, tried: set[str]) -> Placement | None:
        cap = self._limiter.per_replica
        candidates = [
            r
            for r in self._eligible(route.model, tried)
            # on probation (its last requests failed): one at a time (``fleet.outliers``)
            if r.inflight < (1 if r.gateway_streak or r.error_streak else cap)
        ]
        if not candidates:
            return None
        decision = self._policy.select(Snapshot(candidates, self._pool.ids), route)
        replica = self._pool.get(decision.replica_id)
        return None if replica is None else Placement(replica, decision.reason, route.cost)

    def _eligible(self, model: str | None, tried: set[str]) -> Iterator[Replica]:
        """Routable replicas not tried yet that serve ``model`` (or have not listed models)."""
        for r in self._pool.routable():
            if r.id not in tried and (model is None or r.base_model is None or r.serves(model)):
                yield r

    async def forward(
        self,
        request: web.Request,
        route_name: str,
        body: bytes,
        route: RouteRequest,
        identity: Identity = NO_IDENTITY,
        target: str | None = None,
        run: Run = DEFAULT,
        resume: Resumable | None = None,
    ) -> web.StreamResponse:
        """Forward ``request``; raises ``Rejected`` (no slot), ``NoAnswer``, ``AnswerTimeout``.
        ``target``: the path and query sent upstream (default: the request's own; a run's
        request drops its ``/runs/<run>`` prefix). ``run``: whose share of the slots it takes (the
        default run's on the bare path). ``resume``: a stream's plan for continuing it elsewhere
        (``streams.plan``)."""
        exchange = Exchange(
            request,
            route_name,
            route.model,
            target if target is not None else request.rel_url.raw_path_qs,
            body,
            request.headers.get("Content-Type", "application/json"),
            time.perf_counter(),
            identity,
            route.decode_budget,
            run,
            stream=StreamLedger(resume) if resume is not None else None,
        )
        by_model = self._by_model
        model = route.model
        by_model[model] = by_model.get(model, 0) + 1
        try:
            return await self._forward(request, exchange, route)
        finally:
            left = by_model[model] - 1
            if left:
                by_model[model] = left
            else:
                del by_model[model]

    async def _forward(
        self, request: web.Request, exchange: Exchange, route: RouteRequest
    ) -> web.StreamResponse:
        run = exchange.run
        tried: set[str] = set()
        busy: set[str] = set()  # replicas whose connect timed out: tried again after the rest
        errors: list[str] = []
        last_answer: web.Response | None = None
        failures = 0
        deadline = exchange.started + self._timeout_s
        while failures < self._attempts:
            if tried and next(self._eligible(route.model, tried), None) is None:
                if not busy or time.perf_counter() > deadline:
                    break
                tried.difference_update(busy)  # every other was tried: the busy ones again
                busy.clear()
            tracing = self._tracing
            try:
                if tracing is None:
                    placed = await self._limiter.acquire(
                        lambda: self._place(route, tried), run, route
                    )
                else:
                    placed = await self._traced_acquire(tracing, route, tried, run)
            except DomainError:
                if not exchange.streaming:
                    raise
                break  # a stream's continuation found no slot: it is cut below
            replica = placed.replica
            self._metrics.record_decision(placed.reason)
            try:
                if tracing is None:
                    response = await self._attempt(exchange, placed)
                else:
                    response = await self._traced_attempt(tracing, exchange, placed)
                for suspect, status in exchange.suspects or ():
                    self._outliers.server_error(suspect, status)
                return response
            except Busy as exc:  # load, not death: no attempt spent
                tried.add(replica.id)
                busy.add(replica.id)
                errors.append(f"{replica.id}: {exc}")
                self._metrics.record_failover()
            except Failed as exc:
                tried.add(replica.id)
                errors.append(f"{replica.id}: {exc}")
                last_answer = exc.answer or last_answer
                failures += 1
                self._metrics.record_failover()
            except Cut as exc:  # the client has part of a resumable stream
                tried.add(replica.id)
                ledger = exchange.stream
                assert ledger is not None
                ended = await self.streams.resume(exchange, ledger, str(exc))
                if ended is not None:
                    return ended
            finally:
                self._limiter.release(placed)
        if exchange.stream is not None and exchange.streaming:
            return await self.streams.give_up(exchange, exchange.stream, "no_replica")
        if last_answer is not None:
            await last_answer.prepare(request)
            await last_answer.write_eof()
            return last_answer
        raise NoAnswer(errors)

    # -- with tracing on (``--otel-spans``): the same steps, each in its own span --------------

    async def _traced_acquire(
        self, tracing: Tracing, route: RouteRequest, tried: set[str], run: Run
    ) -> Placement:
        def routed() -> Placement | None:
            with tracing.span("proxy.route") as span:
                placed = self._place(route, tried)
                if placed is not None:
                    span.set_attribute("rollout.route", placed.reason)
                return placed

        with tracing.span("proxy.queue"):
            return await self._limiter.acquire(routed, run, route)

    async def _traced_attempt(
        self, tracing: Tracing, ex: Exchange, placed: Placement
    ) -> web.StreamResponse:
        attributes = {"rollout.replica": placed.replica.id, "rollout.route": placed.reason}
        with tracing.span("proxy.upstream", **attributes) as span:
            response = await self._attempt(ex, placed)
            span.set_attribute("http.response.status_code", response.status)
            return response

    async def _attempt(self, ex: Exchange, placed: Placement) -> web.StreamResponse:
        replica = placed.replica
        sent = time.perf_counter()
        try:
            async with self._connections.request(
                replica.url, ex.request.method, ex.path_qs, ex.body, ex.content_type,
                ex.identity.upstream,
            ) as upstream:  # fmt: skip
                ttfb = time.perf_counter()
                headers = response_headers(
                    upstream.headers, replica, placed.reason, ex.model, ex.identity.request_id
                )
                stream = ex.stream
                if stream is not None and (ex.streaming or upstream.content_length is None):
                    # a resumable stream: an ejection cuts it (``Dropped``)
                    relay = self.streams.relay
                    response, done = await relay(ex, stream, upstream, headers, replica.id)
                elif upstream.content_length is not None:
                    response, done = await self._answers.whole(ex, upstream, headers, replica)
                else:
                    upstream.settle()  # a stream's client has bytes from here on: its own
                    answers = self._answers
                    response, ended = await answers.stream(ex.request, upstream, headers, replica)
                    if ended is None:  # cut: its replica failed mid-stream (already counted)
                        return response
                    done = ended
        except Dropped:  # its replica was ejected or removed (``attempts``)
            raise _failure(ex, EJECTED) from None
        except ConnectTimeout:  # load, not death: counted; its probes judge the replica
            self._metrics.record_replica_error(replica.id, "connect_timeout")
            raise (Cut if ex.streaming else Busy)("connect timed out") from None
        except AnswerTimeout:  # slow, not gone: counted, never a gateway failure
            self._metrics.record_replica_error(replica.id, "timeout")
            if ex.streaming:
                raise Cut("timed out") from None
            raise AnswerTimeout(
                f"replica {replica.id} did not answer within {self._timeout_s:g} s"
            ) from None
        except WireError as exc:
            self._answers.gateway_failure(replica, "transport", exc)
            raise _failure(ex, f"{type(exc).__name__}: {exc}") from None
        if replica.gateway_streak or replica.error_streak:
            self._outliers.succeeded(replica)  # a whole answer (a 5xx raised): its streaks end
        finished = time.perf_counter()
        overhead = (finished - ex.started) - (done - sent)
        self._metrics.record_upstream(ex.route_name, replica.id, ttfb - sent, max(overhead, 0.0))
        return response


def _failure(ex: Exchange, reason: str) -> Exception:  # Cut: the client has part of a stream
    return Cut(reason) if ex.streaming else Failed(reason)
