"""The edge's own domain errors: what the HTTP edge refuses before (or instead of) a service.

Raised by the edge's layers, the handlers, the admin API and the connection guard; answered,
like every ``proxy.errors.DomainError``, by the one table (``proxy.http.errors.ANSWERS``). The
body reader's errors are beside it (``proxy.http.bodies``). Each message says what was wrong
and, where the client can do something, what to send instead; none echoes a secret.
"""

from __future__ import annotations

from typing import Any

from proxy.errors import DomainError


class BadRequestId(DomainError):
    """An ``X-Request-ID`` the proxy cannot pass on to a replica."""

    reason = "bad_request"
    param = "X-Request-ID"

    def __init__(self) -> None:
        super().__init__("X-Request-ID must be printable ASCII, 1 to 200 characters")


class UnsafeRequest(DomainError):
    """A request the proxy cannot pass on as it came: a request target or Content-Type that is
    not printable ASCII, or a routing key that is not printable text (they go verbatim)."""

    reason = "bad_request"


class BadPauseMode(DomainError):
    """A ``/pause`` with a ``mode`` vLLM does not have."""

    reason = "bad_request"
    param = "mode"

    def __init__(self, modes: tuple[str, ...]) -> None:
        super().__init__(f"mode must be one of {modes}")


class Unauthorized(DomainError):
    """A request without the key its route needs (``--api-key``, or the admin API's
    ``--admin-key``)."""

    reason = "unauthorized"

    def __init__(self, realm: str) -> None:
        super().__init__(f"missing or wrong {realm} key: send 'Authorization: Bearer <key>'")


class AdminDisabled(DomainError):
    """The admin API, asked while the proxy runs without an admin key."""

    reason = "admin_disabled"

    def __init__(self) -> None:
        super().__init__("the admin API is disabled: start the proxy with --admin-key to enable it")


class HostNotAllowed(DomainError):
    """A replica to add whose host is not one the proxy sends its upstream token to."""

    reason = "host_not_allowed"
    param = "url"

    def __init__(self, patterns: tuple[str, ...]) -> None:
        allowed = ", ".join(patterns) or "none"
        super().__init__(
            f"cannot add replica: its host is not one the proxy sends its upstream token to "
            f"(allowed: {allowed}); start it with --replica-hosts to allow more"
        )


class UnknownRoute(DomainError):
    """A path the proxy does not serve (it forwards an allowlist of vLLM's public routes)."""

    reason = "unknown_route"

    def __init__(self) -> None:
        super().__init__("no such route on the proxy (it forwards vLLM's public API only)")


class WrongMethod(DomainError):
    """A path the proxy serves, asked with a method it does not serve there."""

    reason = "wrong_method"

    def __init__(self, method: str) -> None:
        super().__init__(f"method {method} is not allowed on this route")


class UnknownReplica(DomainError):
    """An admin call naming a replica id the pool does not have."""

    reason = "unknown_replica"

    def __init__(self, replica_id: str) -> None:
        super().__init__(f"no replica with id {replica_id!r}")


class NotReported(DomainError):
    """``/server_info`` or ``/v1/models`` before any routable replica reported it."""

    reason = "not_reported"

    def __init__(self, what: str) -> None:
        super().__init__(f"no routable replica has {what} yet")


class TooManyConnections(DomainError):
    """A client connection beyond ``--max-client-connections`` (answered before any request
    is read, then closed)."""

    reason = "too_many_connections"

    def __init__(self) -> None:
        super().__init__("the proxy has too many client connections; retry shortly")


class ControlRefused(DomainError):
    """A ``/reset_prefix_cache`` (or, with ``--forward-pause``, a pause or resume) that some
    replicas refused; the answer has their status (the most common) and each one's."""

    reason = "replica_refused"

    def __init__(self, message: str, status: int | None, details: dict[str, Any]) -> None:
        super().__init__(message)
        self.status = status
        self.details = details


class ControlUnreached(DomainError):
    """A control call fanned out that no replica could be reached for."""

    reason = "upstream_failed"

    def __init__(self, path: str) -> None:
        super().__init__(f"no replica could be reached for {path}")


class UploadRefused(DomainError):
    """An adapter upload the proxy's own store refused (``adapter_receiver``: its status and
    words, as a replica's receiver answers); the body may be unread."""

    reason = "upload_refused"

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
