"""The upstream client: one connection pool for all traffic to replicas.

Generation traffic, the hot path, goes through ``pool`` (``proxy.upstream.connpool``): lean
HTTP/1.1 keep-alive connections that send the client's bytes as they are and pass the answer
on. Control calls (health, info, adapter loads and pushes, fan-out, scrapes) go through
``call``, on the same pool's control lane: their own connections, never failed by an ejection's
``drop`` and never waiting behind the data path. Every request carries the upstream bearer token
when one is configured; nothing from the client's own headers is copied here. Both raise only
``proxy.upstream.errors``' tree, mapped where the bytes enter (``dial``, ``connection``).
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from typing import Any, Protocol

import orjson

from proxy.config import UpstreamSettings
from proxy.upstream.connpool import CONTROL_ANSWER_LIMIT, ConnectionPool, Streamed
from proxy.upstream.errors import AnswerTooLong, ReplyError

# Idle connections are dropped before uvicorn's (vLLM's server's) 5 s keep-alive ends, so a
# request never goes out on a connection the replica is closing at that moment.
KEEPALIVE_S = 4.0


class Target(Protocol):
    """Where a control-plane call goes: a replica (anything with a base URL)."""

    @property
    def url(self) -> str: ...


@dataclass(frozen=True, slots=True)
class Reply:
    """A complete upstream answer to a control-plane call."""

    status: int
    body: bytes
    content_type: str

    def json(self) -> Any:
        """The body as JSON; ``ReplyError`` when it is not JSON."""
        try:
            return orjson.loads(self.body)
        except orjson.JSONDecodeError as exc:
            raise ReplyError(f"answer is not JSON: {exc}") from None


def ssl_context(settings: UpstreamSettings) -> ssl.SSLContext:
    """TLS for https:// replicas: the system store or the configured CA bundle, or no checks."""
    if not settings.tls_verify:
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        return context
    return ssl.create_default_context(
        cafile=None if settings.ca_bundle is None else str(settings.ca_bundle)
    )


class UpstreamClient:
    """Owns the pool; created and closed by the app's lifecycle."""

    def __init__(self, settings: UpstreamSettings) -> None:
        self.settings = settings
        headers = {}
        if settings.token is not None:
            headers["Authorization"] = f"Bearer {settings.token.get_secret_value()}"
        self.pool = ConnectionPool(
            connect_timeout_s=settings.connect_timeout_s,
            request_timeout_s=settings.request_timeout_s,
            idle_s=KEEPALIVE_S,
            max_answer_bytes=settings.max_answer_bytes,
            tls=ssl_context(settings),
            headers=headers,
            max_connecting=settings.max_connects_per_replica,
        )

    async def close(self) -> None:
        self.pool.close()

    async def call(
        self,
        target: Target,
        method: str,
        path_qs: str,
        *,
        body: bytes | Streamed | None = None,
        timeout_s: float | None = None,
    ) -> Reply:
        """Send one request and read the whole answer (at most ``CONTROL_ANSWER_LIMIT`` bytes,
        else ``AnswerTooLong``). Raises ``UpstreamError`` (never ``ReplyError``: any answer is
        returned).

        ``timeout_s``: the call's deadline, which bounds the connect too; by default
        ``request_timeout_s``, the connect within ``connect_timeout_s``. A bytes body is JSON.
        A ``Streamed`` body (an adapter push) goes out as its iterable yields it, with no time
        limit (the caller paces and watches it; an exception the iterable raises passes through
        as it is), on a new connection opened within ``connect_timeout_s``; then ``timeout_s``
        counts from its last byte."""
        settings = self.settings
        if timeout_s is None:
            timeout_s, connect_s = settings.request_timeout_s, settings.connect_timeout_s
        elif isinstance(body, Streamed):
            connect_s = settings.connect_timeout_s
        else:
            connect_s = timeout_s
        async with self.pool.control(
            target.url, method, path_qs, body, timeout_s=timeout_s, connect_s=connect_s
        ) as answer:
            parts, size = [], 0
            async for part in answer.chunks():  # a Content-Length above the cap is refused first
                size += len(part)
                if size > CONTROL_ANSWER_LIMIT:
                    raise AnswerTooLong(f"answer longer than {CONTROL_ANSWER_LIMIT} bytes")
                parts.append(part)
            return Reply(answer.status, b"".join(parts), answer.headers.get("content-type", ""))
