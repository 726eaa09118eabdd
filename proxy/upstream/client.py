"""The upstream HTTP client: one pooled keep-alive session for all traffic to replicas.

Control-plane calls (health, info, fan-out) go through ``call`` on an aiohttp session. Generation
traffic, the hot path, goes through ``pool``: lean HTTP/1.1 keep-alive connections
(``proxy.upstream.connpool``) that send the client's bytes as they are and pass the answer on. Every
request carries the upstream bearer token when one is configured; nothing from the client's own
headers is copied here. Both raise only ``proxy.upstream.errors``' tree: aiohttp's own errors are
mapped into it where they enter (``mapped``).
"""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Protocol

import aiohttp
import orjson

from proxy.config import UpstreamSettings
from proxy.upstream.connpool import ConnectionPool
from proxy.upstream.errors import (
    AnswerTimeout,
    BadAnswer,
    ConnectError,
    ConnectTimeout,
    Disconnected,
    LocalResourceError,
    ReplyError,
    UpstreamError,
    local_errno,
)

# A control-plane answer (health, models, server info, fan-out, metrics) is read whole: its cap.
CONTROL_ANSWER_LIMIT = 16 * 1024 * 1024
# Idle connections are dropped before uvicorn's (vLLM's server's) 5 s keep-alive ends, so a
# request never goes out on a connection the replica is closing at that moment.
KEEPALIVE_S = 4.0


class AnswerTooLong(BadAnswer):
    """A control-plane answer longer than ``CONTROL_ANSWER_LIMIT``."""


@contextmanager
def mapped() -> Iterator[None]:
    """aiohttp's errors as ``UpstreamError``s (the original kept as the cause)."""
    try:
        yield
    except UpstreamError:
        raise
    except aiohttp.ClientConnectorError as exc:
        if local_errno(exc.os_error):
            raise LocalResourceError(f"the proxy cannot open a connection: {exc}") from exc
        raise ConnectError(str(exc)) from exc
    except aiohttp.ConnectionTimeoutError as exc:
        raise ConnectTimeout(str(exc) or "connect timed out") from exc
    except TimeoutError as exc:  # aiohttp's total and read timeouts (ServerTimeoutError too)
        raise AnswerTimeout(str(exc) or "no answer in time") from exc
    except aiohttp.ClientOSError as exc:
        if local_errno(exc):
            raise LocalResourceError(f"the proxy ran out of its own resources: {exc}") from exc
        raise Disconnected(str(exc)) from exc
    except (aiohttp.ClientConnectionError, aiohttp.ClientPayloadError) as exc:
        raise Disconnected(str(exc) or type(exc).__name__) from exc
    except (aiohttp.ClientResponseError, aiohttp.InvalidURL) as exc:
        raise BadAnswer(str(exc) or type(exc).__name__) from exc


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
    """Owns the session; created and closed by the app's lifecycle."""

    def __init__(self, settings: UpstreamSettings) -> None:
        self.settings = settings
        headers = {}
        if settings.token is not None:
            headers["Authorization"] = f"Bearer {settings.token.get_secret_value()}"
        self.auth_headers: dict[str, str] = headers
        self.timeout = aiohttp.ClientTimeout(
            total=settings.request_timeout_s, connect=settings.connect_timeout_s
        )
        tls = ssl_context(settings)
        connector = aiohttp.TCPConnector(
            limit=0, ssl=tls, keepalive_timeout=KEEPALIVE_S, enable_cleanup_closed=True
        )
        # auto_decompress=False: bodies pass through as the replica sent them.
        self.session = aiohttp.ClientSession(
            connector=connector, timeout=self.timeout, auto_decompress=False, headers=headers
        )
        self.pool = ConnectionPool(
            connect_timeout_s=settings.connect_timeout_s,
            request_timeout_s=settings.request_timeout_s,
            idle_s=KEEPALIVE_S,
            max_answer_bytes=settings.max_answer_bytes,
            tls=tls,
            headers=headers,
        )

    async def close(self) -> None:
        self.pool.close()
        await self.session.close()

    async def call(
        self,
        target: Target,
        method: str,
        path_qs: str,
        *,
        body: bytes | None = None,
        timeout_s: float | None = None,
    ) -> Reply:
        """Send one request and read the whole answer (at most ``CONTROL_ANSWER_LIMIT`` bytes).
        Raises ``UpstreamError`` (never ``ReplyError``: any answer is returned)."""
        timeout = self.timeout if timeout_s is None else aiohttp.ClientTimeout(total=timeout_s)
        headers = {"Content-Type": "application/json"} if body is not None else None
        with mapped():
            async with self.session.request(
                method, target.url + path_qs, data=body, headers=headers, timeout=timeout
            ) as resp:
                return await _whole(resp)

    async def upload(
        self,
        target: Target,
        path: str,
        chunks: AsyncIterable[bytes],
        length: int,
        *,
        content_type: str,
        answer_timeout_s: float,
    ) -> Reply:
        """PUT ``length`` bytes taken from ``chunks`` as they come (``Content-Length``, never
        chunked): memory is what ``chunks`` holds. No time limit while the body goes out (the
        caller paces and watches it); then the answer within ``answer_timeout_s``, read whole.
        Raises ``UpstreamError``; an exception ``chunks`` raises passes through as it is."""
        timeout = aiohttp.ClientTimeout(
            total=None, sock_connect=self.settings.connect_timeout_s, sock_read=answer_timeout_s
        )
        headers = {"Content-Type": content_type, "Content-Length": str(length)}
        with mapped():
            async with self.session.put(
                target.url + path, data=chunks, headers=headers, timeout=timeout
            ) as resp:
                return await _whole(resp)


async def _whole(resp: aiohttp.ClientResponse) -> Reply:
    """The whole answer, at most ``CONTROL_ANSWER_LIMIT`` bytes (else ``AnswerTooLong``)."""
    length = resp.content_length
    if length is not None and length > CONTROL_ANSWER_LIMIT:
        raise AnswerTooLong(f"answer of {length} bytes (limit {CONTROL_ANSWER_LIMIT})")
    parts, size = [], 0
    async for part in resp.content.iter_any():
        size += len(part)
        if size > CONTROL_ANSWER_LIMIT:
            raise AnswerTooLong(f"answer longer than {CONTROL_ANSWER_LIMIT} bytes")
        parts.append(part)
    return Reply(resp.status, b"".join(parts), resp.headers.get("Content-Type", ""))
