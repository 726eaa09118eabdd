"""The scaler's calls to the proxy in front of the replicas (the sidecar, or the proxy job),
standard library only:

- ``GET /proxy/status``: the replicas (routable, draining, in flight, cached tokens served) and
  the advisor's verdict;
- ``POST /admin/replicas/{id}/drain``: no new request goes there; what is in flight finishes
  (or migrates, for a stream cut when the job ends);
- ``POST /admin/scaler``: the last decision, with its reason and the fleet's counts, shown on
  ``/proxy/status`` (``scaler``), ``top`` and ``rollout-deploy status``, and counted in the
  proxy's metrics.

The admin calls carry the proxy's admin key (``Authorization: Bearer``); the status call the
token the proxy's clients need, if any. Every failure is one ``ProxyUnavailable`` line naming
the call and what it got; a key is never part of one.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

TIMEOUT_S = 5.0


class ProxyUnavailable(RuntimeError):
    """A call to the proxy failed; the message says which and how."""


class ProxyCalls:
    def __init__(
        self, base_url: str, admin_key: str, token: str | None = None, timeout_s: float = TIMEOUT_S
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self._admin = {"Authorization": f"Bearer {admin_key}"}
        self._client = {"Authorization": f"Bearer {token}"} if token else {}
        self.timeout_s = timeout_s

    def status(self) -> dict[str, Any]:
        answer = self._call("GET", "/proxy/status", self._client)
        if not isinstance(answer, dict):
            raise ProxyUnavailable("GET /proxy/status answered something other than an object")
        return answer

    def drain(self, replica_id: str) -> None:
        self._call("POST", f"/admin/replicas/{quote(replica_id, safe=':')}/drain", self._admin)

    def report(self, report: Mapping[str, Any]) -> None:
        self._call("POST", "/admin/scaler", self._admin, report)

    def _call(self, method: str, path: str, headers: Mapping[str, str], body: Any = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            self.base_url + path,
            data=data,
            method=method,
            headers={**headers, **({"Content-Type": "application/json"} if data else {})},
        )
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as answer:
                return json.loads(answer.read() or b"null")
        except urllib.error.HTTPError as exc:
            detail = exc.read()[:200].decode(errors="replace").strip()
            raise ProxyUnavailable(
                f"{method} {path} answered HTTP {exc.code}: {detail or exc.reason}"
            ) from None
        except (OSError, ValueError) as exc:
            raise ProxyUnavailable(f"{method} {path} failed: {exc}") from None
