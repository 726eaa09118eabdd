"""The answers the proxy builds itself that are not refusals, and vLLM's error shape for those
that are.

A refusal is a domain error (``proxy.errors``), answered by the one table
(``proxy.http.errors``) in vLLM's shape, ``{"error": {"message", "type", "param", "code"}}``
(``error_body``), so clients that parse vLLM errors parse ours; its ``details`` are added at the
top level (e.g. the per-replica outcome of a fan-out). Here: successes (TRL's pause and resume
answered, a replica's control answer passed on, a load's or an unload's), and ``Redactor``, which
turns a fan-out's or a load's outcomes into a success or the domain error that says what failed.
Messages must never contain a secret: text a replica sent is echoed only through ``Redactor``
(configured secrets replaced, at most ``ECHO_LIMIT`` characters).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import orjson
from aiohttp import web

from proxy.adapters.calls import (
    LoadLagging,
    LoadRefused,
    LoadResult,
    LoadUnreached,
    UnknownAdapter,
    UnloadResult,
)
from proxy.adapters.carry import LoadOutcome
from proxy.dataplane.fanout import ControlOutcome
from proxy.http.refusals import ControlRefused, ControlUnreached
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
    411: "LengthRequired",
    413: "RequestEntityTooLarge",
    500: "InternalServerError",
    502: "BadGateway",
    503: "ServiceUnavailable",
    504: "GatewayTimeout",
    507: "InsufficientStorage",
}


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


def json_response(status: int, payload: object) -> web.Response:
    return web.Response(status=status, body=orjson.dumps(payload), content_type="application/json")


def answered(path: str) -> web.Response:
    """TRL's ``/pause`` or ``/resume``, answered by the proxy: vLLM's body, and what the fleet
    does meanwhile (it keeps generating: ``proxy.dataplane.fanout``)."""
    status = "paused" if path == "/pause" else "resumed"
    return json_response(200, {"status": status, "fleet": "generating"})


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
        """The first replica's answer when every replica answered 200; else ``ControlRefused``
        (some refused) or ``ControlUnreached`` (none answered)."""
        failed = [o for o in outcomes if o.reply is not None and o.status != 200]
        if failed:
            raise self._control_error(path.lstrip("/"), outcomes, failed)
        done = [o.reply for o in outcomes if o.reply is not None]
        if not done:
            raise ControlUnreached(path)
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
    ) -> ControlRefused:
        statuses = Counter(o.status for o in failed if o.status is not None)
        first = self._control_outcome(failed[0])
        detail = first.get("body") or first.get("error")
        message = (
            f"{action} failed on {len(failed)} of {len(outcomes)} replicas; "
            f"{first['replica']} answered {first['status']}: {detail}"
        )
        details = {"replicas": [self._control_outcome(o) for o in outcomes]}
        return ControlRefused(message, _most_common(statuses), details)

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
        """200 only when every routable replica has the version; else ``LoadRefused`` (the
        replicas' own status, after rollback), ``LoadLagging`` (504, never 404: a mount that
        never caught up) or ``LoadUnreached``."""
        outcomes, version = result.outcomes, result.version
        took = [o for o in outcomes if o.status == "ok"]
        failed = [o for o in outcomes if o.status == "failed"]
        lagging = [o for o in outcomes if o.status == "lagging"]
        details = {"replicas": [self._load_outcome(o) for o in outcomes]}
        rolled = f" (rolled back on {len(took)})" if took and (failed or lagging) else ""
        if failed:
            statuses = Counter(o.reply.status for o in failed if o.reply is not None)
            first = self._load_outcome(failed[0])
            message = (
                f"load_lora_adapter failed on {len(failed)} of {len(outcomes)} "
                f"replicas{rolled}; {first['replica']} answered {first['status']}: "
                f"{first.get('body', '')}"
            )
            raise LoadRefused(message, details, _most_common(statuses))
        if lagging:
            message = (
                f"adapter {version.name} did not become visible at {version.path} on "
                f"{len(lagging)} of {len(outcomes)} replicas within {result.deadline_s:g} s "
                f"(their bucket mount lags){rolled}; retry the load, or raise "
                "--adapter-load-deadline"
            )
            raise LoadLagging(message, details)
        if not took:
            raise LoadUnreached("no replica could be reached to load the adapter", details)
        return web.Response(text=f"Success: LoRA adapter '{version.name}' added successfully.")


def _most_common(statuses: Counter[int]) -> int | None:
    """The status most replicas answered (None: none answered; the table says what then)."""
    return statuses.most_common(1)[0][0] if statuses else None


def unload_answer(result: UnloadResult) -> web.Response:
    if not result.known:
        raise UnknownAdapter(result.name)
    return web.Response(text=f"Success: LoRA adapter '{result.name}' removed successfully.")
