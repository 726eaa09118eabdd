"""How forwarding a request can fail before its client saw a byte (answered by the edge,
``proxy.http.errors``): no replica could answer (``NoAnswer``); the one that took it being too
slow is the upstream tree's ``AnswerTimeout``, the proxy's one timeout name."""

from __future__ import annotations

from proxy.errors import DomainError


class NoAnswer(DomainError):
    """No replica could answer (each error says which replica and what happened)."""

    reason = "upstream_failed"

    def __init__(self, errors: list[str]) -> None:
        super().__init__("no replica could answer: " + "; ".join(errors or ["no eligible replica"]))
        self.errors = errors
