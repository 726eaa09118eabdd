"""How forwarding a request can fail before its client saw a byte (answered by the edge,
``proxy.http.errors``): no replica could answer, or the one that took it was too slow."""

from __future__ import annotations

from proxy.errors import DomainError


class NoAnswer(DomainError):
    """No replica could answer (each error says which replica and what happened)."""

    reason = "upstream_failed"

    def __init__(self, errors: list[str]) -> None:
        super().__init__("no replica could answer: " + "; ".join(errors or ["no eligible replica"]))
        self.errors = errors


class UpstreamTimeout(DomainError):
    """The replica took longer than the request timeout, before the client saw a byte."""

    def __init__(self, replica_id: str, timeout_s: float) -> None:
        super().__init__(f"replica {replica_id} did not answer within {timeout_s:g} s")
        self.replica_id = replica_id
        self.timeout_s = timeout_s
