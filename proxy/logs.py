"""Logging set-up with a redaction filter: secrets never reach a log line or an error answer.

Two layers: the configured secrets (API key, admin key, upstream token) are replaced wherever
they appear; and anything shaped like a credential (``Bearer``/``Basic`` values, Hugging Face
tokens, ``user:password@`` in URLs) is replaced too, since a replica or a client may echo one
the proxy does not know.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable

from proxy.config import Settings

REDACTED = "[redacted]"
_CREDENTIALS = re.compile(
    r"(?i)(?P<scheme>\b(?:bearer|basic)\s+)[A-Za-z0-9._~+/=-]+"
    r"|\bhf_[A-Za-z0-9]{16,}"
    r"|(?<=://)[^/@\s]+@"
)


def secret_values(settings: Settings) -> tuple[str, ...]:
    """Every configured secret value (non-empty), longest first so overlaps redact fully."""
    values = [
        secret.get_secret_value()
        for secret in (settings.api_key, settings.admin_key, settings.upstream.token)
        if secret is not None and secret.get_secret_value()
    ]
    return tuple(sorted(values, key=len, reverse=True))


def _replace(match: re.Match[str]) -> str:
    scheme = match.group("scheme")
    if scheme is not None:
        return scheme + REDACTED
    return REDACTED + ("@" if match.group(0).endswith("@") else "")


def redact_tokens(text: str) -> str:
    """``text`` with anything shaped like a credential replaced."""
    return _CREDENTIALS.sub(_replace, text)


def redact(text: str, secrets: tuple[str, ...]) -> str:
    """``text`` with every configured secret and credential-shaped value replaced;
    cost O(len(text) x secrets)."""
    for secret in secrets:
        if secret in text:
            text = text.replace(secret, REDACTED)
    return redact_tokens(text)


class BackgroundErrors:
    """What a background task does with an exception it survived: count it, and log it with its
    traceback once per task and exception type per ``every_s`` (a failing loop must not flood
    the log)."""

    def __init__(
        self,
        count: Callable[[str], None],
        every_s: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._count = count
        self._every_s = every_s
        self._clock = clock
        self._last: dict[tuple[str, str], float] = {}
        self._log = logging.getLogger("proxy.background")

    def __call__(self, task: str, exc: BaseException) -> None:
        self._count(task)
        key = (task, type(exc).__name__)
        now = self._clock()
        if now - self._last.get(key, float("-inf")) < self._every_s:
            return
        self._last[key] = now
        self._log.error(
            "background task %s survived %s: %s (it carries on; this is logged once a minute)",
            task,
            type(exc).__name__,
            exc,
            exc_info=exc,
        )


class RedactingFilter(logging.Filter):
    """Rewrites a record's rendered message when it contains a secret (defence in depth)."""

    def __init__(self, secrets: tuple[str, ...]) -> None:
        super().__init__()
        self._secrets = secrets

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        cleaned = redact(message, self._secrets)
        if cleaned != message:
            record.msg, record.args = cleaned, None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = redact(record.exc_text, self._secrets)
        return True


def configure_logging(settings: Settings) -> None:
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    handler.addFilter(RedactingFilter(secret_values(settings)))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(settings.log_level.upper())
