"""The Hub's Jobs API on the wire, written once for the two servers here that answer it: the
rehearsal's bridge (``deploy.rehearsal.bridge``: its jobs run) and the tests' stand-in
(``tests.support.hub_jobs``: its jobs are scripted). Read in huggingface_hub 2.1.1 to 2.4
(``hf_api.py`` ``run_job``/``list_jobs``/``inspect_job``/``cancel_job``/``fetch_job_logs``,
``_jobs_api.py`` ``JobInfo`` and ``_create_job_spec``, ``utils/_pagination.py``):

- a job is answered as ``job_answer`` shapes it: the spec as sent (camelCase: ``dockerImage``,
  ``command``, ``environment``, ``labels`` with the job's ``name``, ``volumes`` with
  ``mountPath``/``readOnly``, ``expose.ports``, ``network``), its secrets' names with no value,
  ``status.stage``/``message``/``exposeUrls``, ``owner`` (the namespace: a user, or an org) and
  ``initiator``, ``retry`` (``attempts - 1``) when the spec asked for attempts;
- a spec is refused (400) for what the client documents (``spec_refusal``): attempts a positive
  integer; a network group of lowercase alphanumerics and dashes (46 at most), aliases alike (34
  at most), unique, none without a group;
- a list is paged (``page``): a ``Link: <url>; rel="next"`` header names the next page, which the
  client's ``paginate`` follows;
- logs are server-sent events ``data: {"timestamp": ..., "data": line}`` opening with
  ``===== Job started at ... =====`` (``log_stream``); the stream stays open while the job has not
  ended, sending what it logs meanwhile and a ``: keep-alive`` comment after each quiet
  ``keepalive_s``, and closes once it has (the client with ``follow=False`` stops at the first
  event later than the answer's ``Date``, or when it has been quiet 5 s);
- every route needs ``Authorization: Bearer <token>`` (``bearer_matches``; ``refused`` is the
  Hub's 401), and every error answers ``{"error": "<one line>"}`` (``error``).
"""

from __future__ import annotations

import asyncio
import datetime
import json
import re
import secrets
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from aiohttp import web

GROUP_NAME = re.compile(r"^[a-z0-9-]{1,46}$")
ALIAS_NAME = re.compile(r"^[a-z0-9-]{1,34}$")
T = TypeVar("T")
Clock = Callable[[], float]
Lines = Sequence[tuple[datetime.datetime, str]]


def iso(moment: datetime.datetime) -> str:
    """A time as the Hub writes it: UTC, milliseconds, ``Z``."""
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def job_answer(
    *,
    job_id: str,
    namespace: str,
    initiator: str,
    spec: Mapping[str, Any],
    stage: str,
    message: str | None,
    created_at: datetime.datetime,
    expose_urls: Sequence[str],
) -> dict[str, Any]:
    """One job as the Hub's JSON answers it (``run_job``, ``inspect_job``, a ``list_jobs`` item).
    ``spec`` is the body ``run_job`` sent; its secrets are answered by name only."""
    return {
        "id": job_id,
        "createdAt": iso(created_at),
        "dockerImage": spec.get("dockerImage"),
        "spaceId": spec.get("spaceId"),
        "command": spec.get("command"),
        "arguments": spec.get("arguments", []),
        "environment": spec.get("environment", {}),
        "secrets": dict.fromkeys(spec.get("secrets") or {}),
        "flavor": spec.get("flavor"),
        "labels": spec.get("labels"),
        "volumes": spec.get("volumes"),
        "expose": spec.get("expose"),
        "status": {"stage": stage, "message": message, "exposeUrls": list(expose_urls) or None},
        "owner": {
            "id": f"id-{namespace}",
            "name": namespace,
            "type": "user" if namespace == initiator else "org",
        },
        "initiator": {"type": "user", "id": f"id-{initiator}", "name": initiator},
        **({"retry": int(spec["attempts"]) - 1} if "attempts" in spec else {}),
        **({"network": dict(spec["network"])} if spec.get("network") else {}),
    }


def exposed_urls(job_id: str, spec: Mapping[str, Any]) -> list[str]:
    """The Hub's form of a job's exposed URLs: ``https://<id>--<port>.hf.jobs``."""
    ports = (spec.get("expose") or {}).get("ports") or []
    return [f"https://{job_id}--{port}.hf.jobs" for port in ports]


def spec_refusal(spec: object) -> str | None:
    """Why the Hub refuses ``spec`` (a 400), or None (the module docstring's rules)."""
    if not isinstance(spec, dict):
        return "the job spec must be a JSON object"
    attempts = spec.get("attempts", 1)
    if not isinstance(attempts, int) or isinstance(attempts, bool) or attempts < 1:
        return "attempts must be a positive integer"
    return _network_refusal(spec.get("network"))


def _network_refusal(network: object) -> str | None:
    if network is None:
        return None
    if not isinstance(network, dict) or not isinstance(network.get("group"), str):
        return "network must be an object with a group"
    if not GROUP_NAME.match(network["group"]):
        return "network group: lowercase alphanumerics and dashes, 46 characters max"
    aliases = network.get("aliases") or []
    if not isinstance(aliases, list) or not all(
        isinstance(alias, str) and ALIAS_NAME.match(alias) for alias in aliases
    ):
        return "network aliases: lowercase alphanumerics and dashes, 34 characters max"
    if len(set(aliases)) != len(aliases):
        return "network aliases must be unique within the job"
    return None


def wanted(request: web.Request, job_labels: Mapping[str, str], stage: str) -> bool:
    """Whether a job with ``job_labels`` in ``stage`` matches ``list_jobs``'s filters: every
    ``label=k=v`` and, when any is given, one of the ``stage`` values."""
    labels = [value.partition("=") for value in request.query.getall("label", [])]
    stages = set(request.query.getall("stage", []))
    matched = all(job_labels.get(key) == value for key, _, value in labels)
    return matched and (not stages or stage in stages)


def page(found: Sequence[T], request: web.Request, size: int) -> tuple[list[T], dict[str, str]]:
    """The page of ``found`` that ``request``'s cursor asks for, and the ``Link`` header naming
    the next page when there is one."""
    cursor = request.query.get("cursor", "0")
    start = int(cursor) if cursor.isdigit() else 0
    headers = {}
    if start + size < len(found):
        following = request.url.update_query({"cursor": str(start + size)})
        headers["Link"] = f'<{following}>; rel="next"'
    return list(found[start : start + size]), headers


def _event(moment: datetime.datetime, line: str) -> bytes:
    return f"data: {json.dumps({'timestamp': iso(moment), 'data': line})}\n\n".encode()


async def log_stream(
    request: web.Request,
    *,
    created_at: datetime.datetime,
    lines: Callable[[], Lines],
    ended: Callable[[], bool],
    keepalive_s: float,
    clock: Clock,
    tick_s: float,
    max_s: float | None = None,
) -> web.StreamResponse:
    """The ``/logs`` answer: the job's ``lines`` (the last ``?tail=N``), then what it logs until
    ``ended`` (read before each send, so a line logged just before the end goes out), or until
    the stream has lasted ``max_s`` (the client asks again while the job runs)."""
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await response.prepare(request)
    await response.write(_event(created_at, f"===== Job started at {iso(created_at)} ====="))
    tail = request.query.get("tail", "")
    sent = max(len(lines()) - int(tail), 0) if tail.isdigit() else 0
    began = quiet_since = clock()
    while True:
        finished = ended()
        for moment, line in lines()[sent:]:
            await response.write(_event(moment, line))
            sent += 1
            quiet_since = clock()
        gone = request.transport is None or request.transport.is_closing()
        if finished or gone or (max_s is not None and clock() - began >= max_s):
            break
        if clock() - quiet_since >= keepalive_s:
            await response.write(b": keep-alive\n\n")
            quiet_since = clock()
        await asyncio.sleep(tick_s)
    await response.write_eof()
    return response


def bearer_matches(request: web.Request, token: str) -> bool:
    """Whether ``request`` carries ``Authorization: Bearer <token>`` (compared in constant
    time; the header is never logged or answered)."""
    scheme, _, given = request.headers.get("Authorization", "").partition(" ")
    return scheme.lower() == "bearer" and secrets.compare_digest(given.encode(), token.encode())


def refused() -> web.Response:
    """The Hub's answer to a missing or wrong token."""
    return error(401, "Invalid credentials in Authorization header")


def error(status: int, message: str) -> web.Response:
    return web.json_response({"error": message}, status=status)
