"""Every answer the proxy builds itself, in one place; errors in vLLM's shape.

``{"error": {"message", "type", "param", "code"}}``, so clients that parse vLLM errors parse
ours; ``extra`` adds top-level detail (e.g. the per-replica outcome of a fan-out). Services
return outcomes and raise domain errors; the handlers call the builders here. Messages must never
contain a secret: text a replica sent is echoed only through ``Redactor`` (configured secrets
replaced, at most ``ECHO_LIMIT`` characters).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import orjson
from aiohttp import web

from proxy.adapters.calls import LoadResult, UnloadResult
from proxy.adapters.carry import Outcome as LoadOutcome
from proxy.dataplane.fanout import Outcome as ControlOutcome
from proxy.logs import redact
from proxy.upstream.client import Reply

ECHO_LIMIT = 400  # characters of a replica's error text echoed back
_TYPES = {
    400: "BadRequestError",
    401: "AuthenticationError",
    403: "PermissionDeniedError",
    404: "NotFoundError",
    405: "MethodNotAllowed",
    408: "RequestTimeout",
    413: "RequestEntityTooLarge",
    502: "BadGateway",
    503: "ServiceUnavailable",
    504: "GatewayTimeout",
}
RETRY_SOON = {"Retry-After": "1"}


def error_body(
    status: int, message: str, *, param: str | None = None, extra: dict[str, Any] | None = None
) -> bytes:
    error = {
        "message": message,
        "type": _TYPES.get(status, "Error"),
        "param": param,
        "code": status,
    }
    payload: dict[str, Any] = {"error": error}
    if extra:
        payload.update(extra)
    return orjson.dumps(payload)


def error_response(
    status: int,
    message: str,
    *,
    param: str | None = None,
    extra: dict[str, Any] | None = None,
    headers: dict[str, str] | None = None,
) -> web.Response:
    return web.Response(
        status=status,
        body=error_body(status, message, param=param, extra=extra),
        content_type="application/json",
        headers=headers,
    )


def json_response(status: int, payload: object) -> web.Response:
    return web.Response(status=status, body=orjson.dumps(payload), content_type="application/json")


def model_not_found(model: str) -> web.Response:
    """vLLM's own answer for a model the server does not serve."""
    return error_response(404, f"The model `{model}` does not exist.", param="model")


def bad_request_id() -> web.Response:
    return error_response(
        400, "X-Request-ID must be printable ASCII, 1 to 200 characters", param="X-Request-ID"
    )


def no_replica() -> web.Response:
    return error_response(
        503, "no replica is available; retry when /health answers 200", headers=RETRY_SOON
    )


def answered(path: str) -> web.Response:
    """TRL's ``/pause`` or ``/resume``, answered by the proxy: vLLM's body, and what the fleet
    does meanwhile (it keeps generating: ``proxy.dataplane.fanout``)."""
    status = "paused" if path == "/pause" else "resumed"
    return json_response(200, {"status": status, "fleet": "generating"})


def not_reported(what: str) -> web.Response:
    """``/server_info`` or ``/v1/models`` before any routable replica reported it."""
    return error_response(503, f"no routable replica has {what} yet", headers=RETRY_SOON)


def too_large(limit: int) -> web.Response:
    answer = error_response(
        413, f"request body is larger than the proxy's limit of {limit} bytes (--max-body-bytes)"
    )
    answer.force_close()  # the rest of the body is not read: this connection cannot go on
    return answer


def body_timeout(seconds: float) -> web.Response:
    answer = error_response(
        408, f"request body did not arrive within {seconds:g} s (--client-body-timeout)"
    )
    answer.force_close()
    return answer


def body_budget_full(limit: int) -> web.Response:
    return error_response(
        503,
        f"the proxy holds {limit} bytes of request bodies already "
        "(--max-body-bytes-in-flight); retry shortly",
        headers=RETRY_SOON,
    )


def not_found(path_known: bool, method: str) -> web.Response:
    if path_known:
        return error_response(405, f"method {method} is not allowed on this route")
    return error_response(404, "no such route on the proxy (it forwards vLLM's public API only)")


def local_resources(message: str) -> web.Response:
    return error_response(503, message, headers=RETRY_SOON)


def rejected(message: str, retry_after_s: int) -> web.Response:
    return error_response(503, message, headers={"Retry-After": str(retry_after_s)})


def no_answer(detail: str) -> web.Response:
    return error_response(502, f"no replica could answer: {detail}", headers=RETRY_SOON)


def upstream_timeout(message: str) -> web.Response:
    return error_response(504, message)


def passthrough(reply: Reply) -> web.Response:
    """A replica's own control-plane answer, as it sent it."""
    return web.Response(
        status=reply.status,
        body=reply.body,
        headers={"Content-Type": reply.content_type or "application/octet-stream"},
    )


class Redactor:
    """Echoes replica text into answers with the configured secrets removed."""

    def __init__(self, secrets: tuple[str, ...]) -> None:
        self.secrets = secrets

    def echo(self, body: bytes) -> str:
        return redact(body.decode("utf-8", "replace")[:ECHO_LIMIT], self.secrets)

    def text(self, message: str) -> str:
        return redact(message, self.secrets)

    # -- fan-out of /pause, /resume, /reset_prefix_cache ------------------------------------

    def control_answer(self, path: str, outcomes: list[ControlOutcome]) -> web.Response:
        failed = [o for o in outcomes if o.reply is not None and o.status != 200]
        if failed:
            return self._control_error(path.lstrip("/"), outcomes, failed)
        done = [o.reply for o in outcomes if o.reply is not None]
        if not done:
            return error_response(502, f"no replica could be reached for {path}")
        return passthrough(done[0])

    def _control_outcome(self, outcome: ControlOutcome) -> dict[str, Any]:
        if outcome.reply is None:
            return {"replica": outcome.replica.id, "status": None, "error": outcome.error}
        return {
            "replica": outcome.replica.id,
            "status": outcome.reply.status,
            "body": self.echo(outcome.reply.body),
        }

    def _control_error(
        self, action: str, outcomes: list[ControlOutcome], failed: list[ControlOutcome]
    ) -> web.Response:
        statuses = Counter(o.status for o in failed if o.status is not None)
        status = statuses.most_common(1)[0][0] if statuses else 502
        first = self._control_outcome(failed[0])
        detail = first.get("body") or first.get("error")
        message = (
            f"{action} failed on {len(failed)} of {len(outcomes)} replicas; "
            f"{first['replica']} answered {first['status']}: {detail}"
        )
        return error_response(
            status, message, extra={"replicas": [self._control_outcome(o) for o in outcomes]}
        )

    # -- adapter loads and unloads -------------------------------------------------------

    def _load_outcome(self, outcome: LoadOutcome) -> dict[str, Any]:
        out: dict[str, Any] = {
            "replica": outcome.replica.id,
            "outcome": outcome.status,
            "attempts": outcome.attempts,
        }
        if outcome.reply is not None:
            out["status"] = outcome.reply.status
            out["body"] = self.echo(outcome.reply.body)
        else:
            out["status"] = None
        return out

    def load_answer(self, result: LoadResult) -> web.Response:
        """200 only when every routable replica has the version; 504 (never 404) for a mount
        that never caught up; the replicas' own status for a refusal (after rollback)."""
        outcomes, version = result.outcomes, result.version
        took = [o for o in outcomes if o.status == "ok"]
        failed = [o for o in outcomes if o.status == "failed"]
        lagging = [o for o in outcomes if o.status == "lagging"]
        details = {"replicas": [self._load_outcome(o) for o in outcomes]}
        rolled = f" (rolled back on {len(took)})" if took and (failed or lagging) else ""
        if failed:
            statuses = Counter(o.reply.status for o in failed if o.reply is not None)
            status = statuses.most_common(1)[0][0] if statuses else 502
            first = self._load_outcome(failed[0])
            message = (
                f"load_lora_adapter failed on {len(failed)} of {len(outcomes)} "
                f"replicas{rolled}; {first['replica']} answered {first['status']}: "
                f"{first.get('body', '')}"
            )
            return error_response(status, self.text(message), extra=details)
        if lagging:
            message = (
                f"adapter {version.name} did not become visible at {version.path} on "
                f"{len(lagging)} of {len(outcomes)} replicas within {result.deadline_s:g} s "
                f"(their bucket mount lags){rolled}; retry the load, or raise "
                "--adapter-load-deadline"
            )
            return error_response(504, self.text(message), extra=details)
        if not took:
            return error_response(
                502, "no replica could be reached to load the adapter", extra=details
            )
        return web.Response(text=f"Success: LoRA adapter '{version.name}' added successfully.")


def unload_answer(result: UnloadResult) -> web.Response:
    if not result.known:
        return error_response(404, f"The lora adapter '{result.name}' cannot be found.")
    return web.Response(text=f"Success: LoRA adapter '{result.name}' removed successfully.")
