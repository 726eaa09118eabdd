"""One upstream answer given to the client (``Answers``): a Content-Length answer read whole and
sent in one write, or a stream that cannot be resumed copied as it comes; and what a whole
answer tells its owners (usage, the cost model, the run's rollouts, a replica that lost an
adapter). The forwarder (``forward``) decides where a request goes; this is what happens to the
bytes once a replica has answered."""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Container
from typing import Protocol

from aiohttp import web

from proxy.dataplane.exchange import Exchange, Failed
from proxy.dataplane.migration import copy
from proxy.dataplane.usage import usage
from proxy.fleet.outliers import Outliers
from proxy.fleet.pool import EjectCause
from proxy.fleet.replica import Replica
from proxy.metrics.recorder import Metrics
from proxy.routing.cost import CostModel
from proxy.upstream.connection import Connection
from proxy.upstream.errors import AnswerTimeout, WireError

log = logging.getLogger("proxy.forward")


class OutOfStep(Protocol):
    def out_of_step(self, replica: Replica, name: str) -> None: ...

    @property
    def retired(self) -> Container[str]: ...


class Answers:
    def __init__(
        self, metrics: Metrics, outliers: Outliers, adapters: OutOfStep, costs: CostModel
    ) -> None:
        self._metrics = metrics
        self._outliers = outliers
        self._adapters = adapters
        self._retired = adapters.retired  # versions out of the window: their rollouts are stale
        self._costs = costs

    async def whole(
        self, ex: Exchange, upstream: Connection, headers: dict[str, str], replica: Replica
    ) -> tuple[web.StreamResponse, float]:
        """A Content-Length answer: read whole, checked, sent to the client in one write."""
        status = upstream.status
        data = await upstream.read()  # from here on the answer is the client's (``attempts``)
        done = time.perf_counter()
        if status == 404 and self._lost_adapter(replica, ex.model, data):
            raise Failed(f"replica no longer has {ex.model}")
        if ex.request.method == "HEAD":  # the replica's head, its Content-Length included
            headers["Content-Length"] = str(upstream.content_length)
            answer = web.Response(status=status, headers=headers)
        else:
            answer = web.Response(status=status, body=data, headers=headers)
        if status >= 500:
            self._metrics.record_replica_error(replica.id, "5xx")
            ex.suspects = [*(ex.suspects or ()), (replica, status)]  # blamed if another serves it
            raise Failed(f"answered HTTP {status}", answer)
        with contextlib.suppress(ConnectionError):  # the client has gone
            await answer.prepare(ex.request)
            await answer.write_eof()
        self._counted(data, status, replica, ex)
        return answer, done

    async def stream(
        self,
        request: web.Request,
        upstream: Connection,
        headers: dict[str, str],
        replica: Replica,
    ) -> tuple[web.StreamResponse, float | None]:
        """A stream that cannot be resumed: copied as it comes (``copy``, the one stream loop);
        a failure of its replica cuts it (``done`` None: nothing more to count)."""
        response = web.StreamResponse(status=upstream.status, headers=headers)
        try:
            await response.prepare(request)
            await copy(response, upstream, None)
        except ConnectionError:
            # The client has gone. Leaving with the answer unread closes the upstream request,
            # which cancels the generation on the replica; the replica did nothing wrong.
            return response, time.perf_counter()
        except (WireError, AnswerTimeout) as exc:
            # The client already has part of the answer: no failover. Close the connection
            # without the terminating chunk so the client knows the answer is incomplete.
            if isinstance(exc, AnswerTimeout):  # slow, not gone: counted, not ejected
                self._metrics.record_replica_error(replica.id, "timeout")
            else:
                self.gateway_failure(replica, "midstream", exc)
            log.warning("replica %s failed mid-stream: %s", replica.id, exc)
            if request.transport is not None:
                request.transport.close()
            return response, None
        done = time.perf_counter()
        with contextlib.suppress(ConnectionError):  # the client has gone
            await response.write_eof()
        return response, done

    def gateway_failure(self, replica: Replica, cause: EjectCause, exc: BaseException) -> None:
        """Counted; ejects once a streak of them says the replica is gone (``fleet.outliers``)."""
        self._metrics.record_replica_error(replica.id, cause)
        self._outliers.gateway_failure(replica, cause, f"{cause}: {type(exc).__name__}")

    def _counted(self, data: bytes, status: int, replica: Replica, ex: Exchange) -> None:
        """A whole answer's ``usage``, read once, to its three owners: the prompt and cache
        figures, the cost model (what a request's decode budget turned into), and the run's
        rollouts (stale when its version had left the window: TRL drops it). Streamed answers
        carry no whole ``usage`` and are not counted (TRL never streams)."""
        counts = usage(data)
        if counts is None:
            return
        self._metrics.record_usage(replica.id, counts.prompt, counts.cached)
        if status == 200:
            self._costs.observe(ex.decode_budget, counts.completion)
            stale = ex.model in self._retired
            self._metrics.record_rollout(ex.run.name, counts.completion, stale=stale)

    def _lost_adapter(self, replica: Replica, model: str | None, data: bytes) -> bool:
        """vLLM's "model does not exist" for an adapter the replica was believed to hold: it
        restarted unseen. Mark it out of step (reconciled in the background) and fail over."""
        if model is None or model not in replica.adapters or b"does not exist" not in data:
            return False
        self._metrics.record_replica_error(replica.id, "lost_adapter")
        self._adapters.out_of_step(replica, model)
        return True
