"""Domain errors into answers: one table, one place (the edge, ``proxy.http.edge``).

Services raise ``proxy.errors.DomainError``s; ``ErrorAnswers`` turns each into vLLM's error
shape (``responses.error_response``) with the table's status (and ``Retry-After`` where a retry
may succeed), counts the error's own ``reason`` as a rejection, and redacts the configured
secrets from the message (a replica's text may be echoed in it). Anything else is not caught:
aiohttp answers it 500 and logs it with its traceback, as a bug should be.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from aiohttp import web

from proxy.adapters.calls import BadAdapterRequest
from proxy.dataplane.failures import NoAnswer, UpstreamTimeout
from proxy.dataplane.limiter import Rejected
from proxy.errors import DomainError
from proxy.fleet.pool import NoReplica
from proxy.http.responses import Redactor, error_response
from proxy.metrics.recorder import Metrics
from proxy.routing.facts import UnknownModel
from proxy.routing.peek import BadBody
from proxy.runs.table import OverShare, RunPaused, UnknownRun
from proxy.upstream.errors import LocalResourceError

log = logging.getLogger("proxy.http")


@dataclass(frozen=True, slots=True)
class Answer:
    status: int
    retry: bool = False  # Retry-After (the error's own ``retry_after_s``, else 1)
    note: str = ""  # logged at WARNING with the message: what an operator does about it


ANSWERS: dict[type[DomainError], Answer] = {
    BadBody: Answer(400),
    BadAdapterRequest: Answer(400),
    OverShare: Answer(400),
    UnknownModel: Answer(404),
    UnknownRun: Answer(404),
    Rejected: Answer(503, retry=True),
    RunPaused: Answer(503, retry=True),
    NoReplica: Answer(503, retry=True),
    LocalResourceError: Answer(503, retry=True, note="raise the open-files limit: ulimit -n"),
    NoAnswer: Answer(502, retry=True),
    UpstreamTimeout: Answer(504),
}


def answer_for(exc: DomainError) -> Answer:
    for kind in type(exc).__mro__:
        found = ANSWERS.get(kind)
        if found is not None:
            return found
    raise TypeError(f"no answer in proxy.http.errors.ANSWERS for {type(exc).__name__}")


class ErrorAnswers:
    """A domain error as its answer: the table's status, the error's reason counted, the
    configured secrets redacted from its message."""

    def __init__(self, metrics: Metrics, redactor: Redactor) -> None:
        self._metrics = metrics
        self._redactor = redactor

    def answer(self, exc: DomainError) -> web.Response:
        answer = answer_for(exc)
        if exc.reason is not None:
            self._metrics.record_rejection(exc.reason)
        message = self._redactor.text(str(exc))
        if answer.note:
            log.warning("%s (%s)", message, answer.note)
            message = f"{message}; retry shortly"
        headers = None
        if answer.retry:
            headers = {"Retry-After": str(getattr(exc, "retry_after_s", 1))}
        return error_response(answer.status, message, param=exc.param, headers=headers)
