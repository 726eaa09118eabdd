"""The start-up warnings: an HF Jobs replica without a token, a proxy with no replica."""

from __future__ import annotations

import logging

import pytest

from proxy.config import Settings
from proxy.fleet.startup import startup_warnings, warn_at_start

JOBS = "https://abc123--8000.hf.jobs"


def test_an_hf_jobs_replica_without_a_token_is_warned_about(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="proxy")
    warn_at_start(Settings.model_validate({"replicas": [JOBS, "http://10.0.0.2:8000"]}))
    assert [(r.levelno, r.getMessage()) for r in caplog.records] == [
        (
            logging.WARNING,
            f"{JOBS}: HF Jobs' exposed ports answer 401 without a token; give one with read "
            "access with --upstream-token (PROXY_UPSTREAM_TOKEN)",
        )
    ]


def test_with_a_token_there_is_nothing_to_say() -> None:
    settings = Settings.model_validate({"replicas": [JOBS], "upstream_token": "hf_x"})
    assert startup_warnings(settings) == []


@pytest.mark.parametrize(
    ("given", "hint"),
    [
        ({}, "no replicas configured: add some with --replica-urls"),
        (
            {"admin_key": "k"},
            "no replicas configured: add some with --replica-urls or the admin API",
        ),
    ],
)
def test_the_no_replica_hint_names_only_what_this_proxy_offers(
    given: dict[str, str], hint: str
) -> None:
    assert startup_warnings(Settings.model_validate(given)) == [hint]


def test_discovered_replicas_need_no_hint() -> None:
    settings = Settings.model_validate({"discover": "dns:replicas.internal:8000"})
    assert startup_warnings(settings) == []
