"""Reading request bodies: one reader for every route that takes one (the handlers, the admin API).

Every body is read within three bounds, each refused through the error table
(``proxy.http.errors``): the body limit (``BodyTooLarge``, 413; a declared length above it is
refused before a byte is read), the body timeout (``BodyTimeout``, 408) and the memory budget
(``BodyBudgetFull``, 503 with ``Retry-After``). The first two leave the rest of the body unread,
so their answers close the connection.

The budget (``BodyBudget``) covers the bodies the proxy holds (read, queued or being forwarded):
it is charged by the bytes received, as they arrive (a declared length alone reserves nothing:
declaring 32 MiB and sending nothing costs only the sender), and a body's bytes stay reserved
until ``BodyReader.release``; so bodies in flight and in the wait queue never hold more than
``limit`` bytes together. A request that does not fit is refused at once instead of waiting:
the budget protects the proxy, it is not a queue.

``json_object`` is the admin API's decoder: a body that is not a JSON object is a
``BadAdminBody`` (400) saying what to send; ``admin_body_fault`` maps the ``ValueError`` of what
checks an admin body's values (the settings' URL check, the pool, the runs table: they speak
``ValueError`` to the command line too) to one.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import orjson
from aiohttp import web

from proxy.config import ClientSettings
from proxy.errors import DomainError


class BodyTooLarge(DomainError):
    """A request body above the proxy's limit; the rest of it is not read."""

    reason = "too_large"

    def __init__(self, limit: int) -> None:
        super().__init__(
            f"request body is larger than the proxy's limit of {limit} bytes (--max-body-bytes)"
        )


class BodyTimeout(DomainError):
    """A request body that did not arrive within the body timeout; the rest is not read."""

    reason = "body_timeout"

    def __init__(self, seconds: float) -> None:
        super().__init__(
            f"request body did not arrive within {seconds:g} s (--client-body-timeout)"
        )


class BodyBudgetFull(DomainError):
    """The request bodies the proxy holds already fill its memory budget for them."""

    reason = "body_budget"

    def __init__(self, limit: int) -> None:
        super().__init__(
            f"the proxy holds {limit} bytes of request bodies already "
            "(--max-body-bytes-in-flight); retry shortly"
        )


class BadAdminBody(DomainError):
    """A body the admin API cannot carry out (the message says what to send)."""

    reason = "bad_request"


@contextmanager
def admin_body_fault(what: str) -> Iterator[None]:
    """A ``ValueError`` raised inside, as ``BadAdminBody("<what>: <its words>")``."""
    try:
        yield
    except ValueError as exc:
        raise BadAdminBody(f"{what}: {exc}") from None


class BodyBudget:
    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.held = 0

    def reserve(self, size: int) -> bool:
        if self.held + size > self.limit:
            return False
        self.held += size
        return True

    def release(self, size: int) -> None:
        self.held -= size


class BodyReader:
    """Reads bodies within the body limit, the body timeout and ``budget``."""

    def __init__(self, settings: ClientSettings, budget: BodyBudget) -> None:
        self.limit = settings.max_body_bytes
        self.timeout_s = settings.body_timeout_s
        self.budget = budget

    async def read(self, request: web.Request) -> bytes:
        """The request's body, its bytes reserved in the budget until ``release(len(body))``."""
        limit, length = self.limit, request.content_length
        if length is not None and length > limit:
            raise BodyTooLarge(limit)
        if request.content.is_eof():  # all of it came with the head: nothing to time
            try:
                body = await request.read()
            except web.HTTPRequestEntityTooLarge:
                # aiohttp's own check (the app's client_max_size, the same limit) of a chunked
                # body that came whole: its answer, in our words and counted.
                raise BodyTooLarge(limit) from None
            if not self.budget.reserve(len(body)):
                raise BodyBudgetFull(self.budget.limit)
            return body
        held, chunks, kept = 0, [], False
        try:
            async with asyncio.timeout(self.timeout_s):
                while chunk := await request.content.readany():
                    if held + len(chunk) > limit:
                        raise BodyTooLarge(limit)
                    if not self.budget.reserve(len(chunk)):
                        raise BodyBudgetFull(self.budget.limit)
                    held += len(chunk)
                    chunks.append(chunk)
            kept = True
        except TimeoutError:
            raise BodyTimeout(self.timeout_s) from None  # asyncio's timeout, in our words
        finally:
            if not kept:
                self.budget.release(held)
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)

    def release(self, size: int) -> None:
        self.budget.release(size)

    async def json_object(self, request: web.Request, shape: str) -> dict[str, Any]:
        """The body as a JSON object (read and released here); ``BadAdminBody(shape)`` when it
        is not one."""
        body = await self.read(request)
        self.release(len(body))
        try:
            data = orjson.loads(body)
        except orjson.JSONDecodeError:
            data = None  # orjson's words are not what to send: the caller's shape is
        if not isinstance(data, dict):
            raise BadAdminBody(shape)
        return data
