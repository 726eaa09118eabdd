"""``deploy up`` puts the wheel into the bucket through the real client's upload path (a Xet write
token, the CAS upload, the NDJSON ``/batch`` commit), and an upload that fails stops the run
before any job is launched, with a message that says what to do."""

from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest
from huggingface_hub.utils._xet import abort_xet_session

from tests.deploy.conftest import TOKEN, WHEEL, WHEEL_PATH, Stand

UP = ("up", "--bucket", "alice/rl", "--model", "m", "--run-name", "r1", "--replica-count", "1")


def test_the_wheel_reaches_the_bucket_over_http(stand: Stand) -> None:
    stand.fleet(1)

    result = stand.cli(*UP)

    assert result.code == 0, result.err
    assert stand.uploaded() == WHEEL
    entry = stand.hub.buckets.buckets["alice/rl"].files[WHEEL_PATH]
    assert entry.size == len(WHEEL)
    cas = stand.hub.buckets.requests
    assert any(line.startswith("POST /v1/xorbs/") for line in cas), cas
    assert any(line.endswith("/shards") for line in cas), cas
    assert f"uploaded hf://buckets/alice/rl/{WHEEL_PATH}" in result.out
    script = stand.hub.named("r1-replica-0").spec["command"][2]
    assert f"/lora/{WHEEL_PATH}" in script


@pytest.fixture
def fresh_xet_session() -> Iterator[None]:
    """hf_xet keeps one session per process, and 1.5 keeps a failed upload's error in it for the
    next ("Previous task error"): a real ``deploy up`` uploads once per process, tests many."""
    yield
    abort_xet_session()  # type: ignore[no-untyped-call]  # huggingface_hub leaves it untyped


@pytest.mark.usefixtures("fresh_xet_session")
@pytest.mark.parametrize(
    ("route", "status", "hint"),
    [
        ("xet-write-token", 403, "write access to the bucket alice/rl"),
        ("xorbs", 403, "write access to the bucket alice/rl"),
        ("batch", 422, "run `deploy up` again"),
        ("shards", 400, "run `deploy up` again"),
    ],
)
def test_a_failed_upload_stops_the_run_and_says_what_to_do(
    stand: Stand, route: str, status: int, hint: str
) -> None:
    stand.hub.buckets.fail(route, status, "refused by the stand-in")

    result = stand.cli(*UP)

    assert result.code == 1
    assert f"uploading the wheel to hf://buckets/alice/rl/{WHEEL_PATH} failed" in result.err
    assert hint in result.err
    assert "--code image" in result.err
    assert "Traceback" not in result.err and TOKEN not in result.err
    assert stand.hub.jobs == {}


def test_without_hf_xet_the_upload_says_how_to_get_it(
    stand: Stand, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "hf_xet", None)  # what a platform without its wheel has

    result = stand.cli(*UP)

    assert result.code == 1
    assert "pip install hf_xet" in result.err
    assert stand.hub.jobs == {}
