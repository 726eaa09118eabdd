"""The logging filter the proxy's CLI installs: a configured secret, or anything shaped like a
credential, never reaches a rendered log line or a traceback (SECURITY.md, "Where secrets
live"). The handler is the real one ``configure_logging`` builds, writing to a buffer."""

from __future__ import annotations

import io
import logging
from collections.abc import Iterator

import pytest

from proxy.config import Settings
from proxy.logs import REDACTED, RedactingFilter, configure_logging

SECRET = "proxy-api-key-0123456789"


@pytest.fixture
def rendered() -> Iterator[io.StringIO]:
    root = logging.getLogger()
    saved = (root.handlers[:], root.level)
    configure_logging(Settings.model_validate({"api_key": SECRET}))
    buffer = io.StringIO()
    (handler,) = root.handlers
    assert isinstance(handler, logging.StreamHandler)
    handler.setStream(buffer)
    yield buffer
    root.handlers[:], level = saved
    root.setLevel(level)


def test_a_secret_in_a_message_its_args_or_a_traceback_is_replaced(rendered: io.StringIO) -> None:
    log = logging.getLogger("proxy.test")
    log.warning("key in the message: %s", SECRET)
    log.warning(f"key pasted in: {SECRET}")
    try:
        raise ValueError(f"failed with {SECRET} and Authorization: Bearer abc.def")
    except ValueError:
        log.exception("background task failed")
    text = rendered.getvalue()
    assert SECRET not in text
    assert "Bearer abc.def" not in text
    assert text.count(REDACTED) >= 4
    assert "Traceback" in text and "ValueError" in text  # the traceback itself is kept


def test_credential_shaped_values_it_was_not_told_of_are_replaced_too() -> None:
    record = logging.LogRecord("x", logging.INFO, __file__, 1,
                               "replica said %s", ("use hf_abcdefghijklmnopqrst or "
                                                   "http://u:pw@host/",), None)  # fmt: skip
    assert RedactingFilter(()).filter(record)
    assert record.getMessage() == f"replica said use {REDACTED} or http://{REDACTED}@host/"
