"""Domain errors into answers: one table, one place.

Every error answer the proxy originates (a replica's own answer passed on is not one) is a
``proxy.errors.DomainError`` answered here: services, the handlers, the admin API and the edge's
layers raise; the edge (``proxy.http.edge``) catches ``DomainError`` once per request and calls
``ErrorAnswers.answer``; the connection guard, which refuses before aiohttp reads a request,
writes the bytes ``ErrorAnswers.refusal`` made from the same row. Anything else is not caught:
aiohttp answers it 500 and logs it with its traceback, as a bug should be.

Each row (``Answer``) says: the status; what the client or operator does about it (the errors
reference, ``docsgen/error_pages.py``); ``Retry-After`` (the error's own ``retry_after_s``,
else 1); whether the answer closes the connection (the body was left unread, so the
connection cannot carry another request); whether the error's own ``status`` replaces the
row's (a replicas' refusal echoed: the row's status is the one answered when none replied);
fixed headers; and the operator's note, logged at WARNING. An answer counts one
``rollout_proxy_rejections_total{reason}``: the error's ``reason``, else the row's (for an
error class of a room that names none itself). Messages are redacted (configured secrets
replaced: a replica's text may be echoed in them); under ``/runs/<run>/`` the answer reads with
the run's own names (``Run.answer``).

Invariants (``tests/unit/test_error_table.py``): every row resolves to one label of
``REJECTION_REASONS``; every row has a test that provokes it through a real proxy.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from http import HTTPStatus

from aiohttp import web

from proxy.adapters.calls import (
    BadAdapterRequest,
    LoadLagging,
    LoadRefused,
    LoadUnreached,
    UnknownAdapter,
)
from proxy.dataplane.failures import NoAnswer
from proxy.dataplane.limiter import Rejected
from proxy.errors import DomainError
from proxy.fleet.pool import NoReplica
from proxy.http.bodies import BadAdminBody, BodyBudgetFull, BodyTimeout, BodyTooLarge
from proxy.http.refusals import (
    AdminDisabled,
    BadPauseMode,
    BadRequestId,
    ControlRefused,
    ControlUnreached,
    HostNotAllowed,
    NotReported,
    TooManyConnections,
    Unauthorized,
    UnknownReplica,
    UnknownRoute,
    UnsafeRequest,
    UploadRefused,
    WrongMethod,
)
from proxy.http.responses import Redactor, error_body
from proxy.metrics.recorder import Metrics
from proxy.routing.facts import UnknownModel
from proxy.routing.peek import BadBody
from proxy.runs.run import DEFAULT, Run
from proxy.runs.table import OverShare, RunPaused, UnknownRun
from proxy.upstream.errors import AnswerTimeout, LocalResourceError

log = logging.getLogger("proxy.http")


@dataclass(frozen=True, slots=True)
class Answer:
    status: int
    remedy: str  # what the client (or the operator) does about it: the errors reference's
    retry: bool = False  # Retry-After (the error's own ``retry_after_s``, else 1)
    closes: bool = False  # Connection: close (the request's body is left unread)
    echoes: bool = False  # the error's own ``status``, when it has one, replaces ``status``
    reason: str | None = None  # the label, for an error class that names none itself
    headers: tuple[tuple[str, str], ...] = ()
    note: str = ""  # logged at WARNING with the message: what an operator does about it


_FIX_BODY = "fix the request as the message says"
_RETRY = "retry after Retry-After seconds"
ANSWERS: dict[type[DomainError], Answer] = {
    BadRequestId: Answer(400, "send an X-Request-ID of printable ASCII, or none"),
    UnsafeRequest: Answer(400, "percent-encode the target; send ASCII header values"),
    BadPauseMode: Answer(400, "ask /pause with mode abort, wait or keep"),
    BadBody: Answer(400, _FIX_BODY + " (the field is in error.param)"),
    BadAdapterRequest: Answer(400, _FIX_BODY + " (the field is in error.param)"),
    BadAdminBody: Answer(400, "send the body the message shows"),
    OverShare: Answer(400, "unload an adapter of the run first, or raise --max-loras"),
    Unauthorized: Answer(
        401, "send 'Authorization: Bearer <key>'", headers=(("WWW-Authenticate", "Bearer"),)
    ),
    AdminDisabled: Answer(403, "start the proxy with --admin-key"),
    HostNotAllowed: Answer(403, "allow the replica's host with --replica-hosts"),
    UnknownModel: Answer(404, "name a model /v1/models lists (or load the adapter first)"),
    UnknownRun: Answer(404, "declare the run (--runs, or POST /admin/runs)"),
    UnknownRoute: Answer(404, "call one of vLLM's public routes the proxy serves"),
    UnknownReplica: Answer(404, "name a replica id GET /admin/replicas lists"),
    UnknownAdapter: Answer(404, "nothing to do: no replica holds that adapter"),
    WrongMethod: Answer(405, "use the route's method"),
    BodyTimeout: Answer(408, "send the body promptly, or raise --client-body-timeout", closes=True),
    BodyTooLarge: Answer(413, "send a smaller body, or raise --max-body-bytes", closes=True),
    Rejected: Answer(503, _RETRY + "; the advisor says what limits the fleet", retry=True),
    RunPaused: Answer(503, _RETRY + "; the run's trainer must resume it", retry=True),
    NoReplica: Answer(503, _RETRY + "; /health says why", retry=True, reason="no_replica"),
    LocalResourceError: Answer(
        503,
        _RETRY + "; raise the proxy's open-files limit (ulimit -n)",
        retry=True,
        note="raise the open-files limit: ulimit -n",
    ),
    BodyBudgetFull: Answer(503, _RETRY + ", or raise --max-body-bytes-in-flight", retry=True),
    NotReported: Answer(503, _RETRY + "; /health says when a replica is in", retry=True),
    TooManyConnections: Answer(
        503, _RETRY + ", or raise --max-client-connections", retry=True, closes=True
    ),
    NoAnswer: Answer(502, _RETRY + "; the replicas' errors are in the message", retry=True),
    ControlUnreached: Answer(502, "retry once /health answers 200"),
    ControlRefused: Answer(502, "read each replica's answer in 'replicas'", echoes=True),
    LoadUnreached: Answer(502, "retry the load once /health answers 200"),
    LoadRefused: Answer(502, "read each replica's answer in 'replicas'", echoes=True),
    LoadLagging: Answer(504, "retry the load, or raise --adapter-load-deadline"),
    AnswerTimeout: Answer(504, "raise --request-timeout, or ask for fewer tokens"),
    UploadRefused: Answer(400, "fix the upload as the message says", closes=True, echoes=True),
}


def answer_for(kind: type[DomainError]) -> Answer:
    for base in kind.__mro__:
        found = ANSWERS.get(base)
        if found is not None:
            return found
    raise TypeError(f"no answer in proxy.http.errors.ANSWERS for {kind.__name__}")


def reason_of(exc: DomainError, answer: Answer) -> str:
    reason = exc.reason or answer.reason
    if reason is None:
        raise TypeError(f"{type(exc).__name__} names no reason, nor does its row in ANSWERS")
    return reason


class ErrorAnswers:
    """A domain error as its answer: the table's row, the error's reason counted, the
    configured secrets redacted from its message."""

    def __init__(self, metrics: Metrics, redactor: Redactor) -> None:
        self._metrics = metrics
        self._redactor = redactor

    def answer(self, exc: DomainError, run: Run = DEFAULT) -> web.Response:
        """``exc``'s answer; under a run, with the run's own names."""
        answer = answer_for(type(exc))
        self._metrics.record_rejection(reason_of(exc, answer))
        message = self._redactor.text(str(exc))
        if answer.note:
            log.warning("%s (%s)", message, answer.note)
            message = f"{message}; retry shortly"
        status = _status(exc, answer)
        body = run.answer(error_body(status, message, param=exc.param, extra=exc.details))
        response = web.Response(
            status=status, body=body, content_type="application/json", headers=_headers(exc, answer)
        )
        if answer.closes:
            response.force_close()
        return response

    def refusal(self, exc: DomainError) -> Callable[[], bytes]:
        """``exc``'s answer as a whole HTTP/1.1 response, for a refusal made before aiohttp
        reads a request (the connection guard's): made once; each call counts it. Such an
        answer always closes its connection."""
        answer = answer_for(type(exc))
        reason = reason_of(exc, answer)
        assert answer.closes, f"{type(exc).__name__}: a refusal before a request must close"
        status = _status(exc, answer)
        body = error_body(status, self._redactor.text(str(exc)), param=exc.param)
        head = [f"HTTP/1.1 {status} {HTTPStatus(status).phrase}", "Content-Type: application/json"]
        head += [f"{name}: {value}" for name, value in _headers(exc, answer).items()]
        head += ["Connection: close", f"Content-Length: {len(body)}", "", ""]
        raw = "\r\n".join(head).encode("ascii") + body
        record = self._metrics.record_rejection

        def refuse() -> bytes:
            record(reason)
            return raw

        return refuse


def _status(exc: DomainError, answer: Answer) -> int:
    return exc.status if answer.echoes and exc.status is not None else answer.status


def _headers(exc: DomainError, answer: Answer) -> dict[str, str]:
    headers = dict(answer.headers)
    if answer.retry:
        headers["Retry-After"] = str(getattr(exc, "retry_after_s", 1))
    return headers
