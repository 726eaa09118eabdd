"""HTTP GETs through a job's exposed URL, which HF Jobs answers only with the HF bearer token.

Blocking (``urllib``), like the Hub client the deploy commands already wait on. A probe never
raises: it returns what happened (``ok`` and a short ``detail`` such as ``200``, ``503`` or
``connection refused``) for progress lines and error messages.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

DEFAULT_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class Probe:
    ok: bool
    detail: str
    body: Any = None


Prober = Callable[[str, str], Probe]


def get(url: str, token: str, timeout_s: float = DEFAULT_TIMEOUT_S) -> Probe:
    """GET ``url`` with ``Authorization: Bearer <token>``; a 2xx is ``ok``, its JSON in ``body``."""
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            raw = response.read()
            status = response.status
    except urllib.error.HTTPError as exc:
        exc.close()
        hint = " (token refused)" if exc.code in (401, 403) else ""
        return Probe(False, f"HTTP {exc.code}{hint}")
    except (urllib.error.URLError, OSError) as exc:
        reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
        return Probe(False, str(reason) or type(reason).__name__)
    try:
        body = json.loads(raw) if raw else None
    except ValueError:
        body = None
    return Probe(True, f"HTTP {status}", body)
