"""Logging set-up with a redaction filter: configured secrets never reach a log line."""

from __future__ import annotations

import logging

from proxy.config import Settings

REDACTED = "[redacted]"


def secret_values(settings: Settings) -> tuple[str, ...]:
    """Every configured secret value (non-empty), longest first so overlaps redact fully."""
    values = [
        secret.get_secret_value()
        for secret in (settings.api_key, settings.admin_key, settings.upstream.token)
        if secret is not None and secret.get_secret_value()
    ]
    return tuple(sorted(values, key=len, reverse=True))


def redact(text: str, secrets: tuple[str, ...]) -> str:
    """``text`` with every secret value replaced; cost O(len(text) x secrets)."""
    for secret in secrets:
        if secret in text:
            text = text.replace(secret, REDACTED)
    return text


class RedactingFilter(logging.Filter):
    """Rewrites a record's rendered message when it contains a secret (defence in depth)."""

    def __init__(self, secrets: tuple[str, ...]) -> None:
        super().__init__()
        self._secrets = secrets

    def filter(self, record: logging.LogRecord) -> bool:
        if self._secrets:
            message = record.getMessage()
            cleaned = redact(message, self._secrets)
            if cleaned != message:
                record.msg, record.args = cleaned, None
        return True


def configure_logging(settings: Settings) -> None:
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    handler.addFilter(RedactingFilter(secret_values(settings)))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(settings.log_level.upper())
