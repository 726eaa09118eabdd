"""Stream migration: a streamed generation whose replica dies or is ejected mid-stream carries on
from another replica holding the same model, in the same response to the client.

The forwarder sends a resumable stream (``resumable``) like any request; ``relay`` copies its
events through the stream's ledger (``ledger``) with ``copy``, the one stream loop (a stream that
cannot be resumed goes through it too, without a ledger: ``forward``). When the replica fails
under it (a transport error, its ejection for any cause, an early end without ``[DONE]``), the
attempt raises ``Cut`` and the forwarder's loop picks another replica as for a failover before
the first byte, sending the ledger's continuation (``resume``) instead of the original body. At
most ``--max-stream-migrations`` times per request; then, or when no replica is left, or when the
stream cannot be continued faithfully, the client connection is closed without the stream's
end, as before (the client knows the answer is incomplete). A stream whose last token already
reached the client is ended here (its usage chunk and ``[DONE]``) instead of generating more.
The response's ``X-Rollout-Replica`` header names the first replica; each continuation is
announced by an SSE comment naming the next one.

What a client can tell: the tokens are continuous (no token is sent twice or skipped) and
sampled from the same prefix under the same policy; a ``seed`` cannot be carried over exactly,
so a seeded stream that migrated differs from its unbroken run after the migration point.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable

from aiohttp import web

from proxy.dataplane.exchange import Exchange
from proxy.dataplane.ledger import StreamLedger
from proxy.dataplane.resumable import COMPLETIONS_PATH, Resumable, resumable
from proxy.metrics.recorder import Metrics
from proxy.upstream.connection import Connection
from proxy.upstream.errors import AnswerTimeout

log = logging.getLogger("proxy.forward")


class Cut(Exception):
    """A resumable stream's replica failed after the client had part of the answer."""


class Migrations:
    """Resumable streams: planned at the request, relayed, continued when cut."""

    def __init__(self, metrics: Metrics, max_migrations: int) -> None:
        self._metrics = metrics
        self._max = max_migrations

    def plan(self, route: str, body: bytes) -> tuple[Resumable | None, bytes]:
        """The plan of a streamed request on ``route`` (None: not resumable) and its body."""
        if self._max == 0:
            return None, body
        found = resumable(route, body)
        return (None, body) if found is None else found

    async def relay(
        self, ex: Exchange, ledger: StreamLedger, upstream: Connection, headers: dict[str, str],
        replica: str,
    ) -> tuple[web.StreamResponse, float]:  # fmt: skip
        """Copy a resumable stream to the client; raises ``Cut`` when its replica fails (the
        transport's errors propagate to the forwarder, which ejects the replica and cuts)."""
        response = ex.response
        opening = response is None
        if response is None:
            ledger.opened(upstream.status)
            response = ex.answer(web.StreamResponse(status=upstream.status, headers=headers))
        elif upstream.status != 200 or upstream.content_length is not None:
            answer = await upstream.read()  # a continuation refused: another replica may do
            raise Cut(f"the continuation answered HTTP {upstream.status}: {answer[:200]!r}")
        try:
            if opening:
                await response.prepare(ex.request)
            else:
                await response.write(ledger.announce(replica))
            await copy(response, upstream, ledger.feed)
        except ConnectionError:  # the client has gone; leaving closes the upstream request
            return response, time.perf_counter()
        except AnswerTimeout:  # slow, not gone: the request's time is up, wherever it runs
            self._metrics.record_replica_error(replica, "timeout")
            await self.give_up(ex, ledger, "timeout")
            return response, time.perf_counter()
        done = time.perf_counter()
        if not ledger.done:
            raise Cut("the stream ended without [DONE]")
        with contextlib.suppress(ConnectionError):
            await response.write_eof()
        return response, done

    async def resume(
        self, ex: Exchange, ledger: StreamLedger, why: str
    ) -> web.StreamResponse | None:
        """After a cut: None when the exchange now carries the continuation (send it to
        another replica), else the client's response, ended here."""
        if ledger.finished or ledger.left() == 0:
            return await self._end(ex, ledger)
        if ledger.opaque:
            return await self.give_up(ex, ledger, "not_resumable")
        if ledger.migrations >= self._max:
            return await self.give_up(ex, ledger, "exhausted")
        body = ledger.continue_from()
        if body is not None:
            ex.send_instead(body, COMPLETIONS_PATH)
        self._metrics.record_stream_migration("continued")
        log.info("stream %s continues elsewhere after %d tokens (%s)",
                 ex.identity.request_id or "-", len(ledger.sent), why)  # fmt: skip
        return None

    async def give_up(self, ex: Exchange, ledger: StreamLedger, outcome: str) -> web.StreamResponse:
        """End the client's stream as a cut one: its connection closed without the end."""
        self._metrics.record_stream_migration(outcome)
        log.warning("stream %s cut after %d tokens (%s)",
                    ex.identity.request_id or "-", len(ledger.sent), outcome)  # fmt: skip
        if ex.request.transport is not None:
            ex.request.transport.close()
        assert ex.response is not None
        return ex.response

    async def _end(self, ex: Exchange, ledger: StreamLedger) -> web.StreamResponse:
        self._metrics.record_stream_migration("completed")
        response = ex.response
        assert response is not None
        with contextlib.suppress(ConnectionError):
            await response.write(ledger.closing())
            await response.write_eof()
        return response


async def copy(
    response: web.StreamResponse, upstream: Connection, feed: Callable[[bytes], bytes] | None
) -> None:
    """The one stream loop: each chunk read from ``upstream`` is written to the client as it
    comes, through ``feed`` for a resumable stream (its ledger's). Raises ``ConnectionError``
    when the client has gone and the upstream's errors as they come: what each means is the
    caller's to say."""
    async for chunk in upstream.chunks():
        out = chunk if feed is None else feed(chunk)
        if out:
            await response.write(out)
