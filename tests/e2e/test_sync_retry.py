"""TRL's own client code with ``trainer_entry.sync_retry`` around it: a sync call that meets a
gap of the proxy (refused, or reset in flight) is sent again and completes; an answer, any
status, is TRL's to judge and is never sent twice; the client pickles as TRL's does."""

from __future__ import annotations

import logging
import pickle
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest

from tests.support.servers import free_port

CALL_TIMEOUT_S = 30  # the sync call's own timeout: the retries' budget

# TRL 1.16 warns at import that it was tested up to vLLM 0.31 (the tier runs 0.32, REFERENCE 5).
pytestmark = pytest.mark.filterwarnings("ignore:TRL currently supports vLLM versions:UserWarning")


class Proxy:
    """A stand-in for the proxy's sync routes: answers ``statuses`` in turn (None: closes the
    connection without an answer, as a proxy killed mid-request does), then 200."""

    def __init__(self, port: int, statuses: list[int | None]) -> None:
        self.port, self.statuses, self.calls = port, list(statuses), 0
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                owner.calls += 1
                status = owner.statuses.pop(0) if owner.statuses else 200
                if status is None:
                    self.close_connection = True
                    return
                body = b"Success" if status == 200 else b'{"error": "busy"}'
                self.send_response(status)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.handler = Handler
        self.server: ThreadingHTTPServer | None = None

    def start(self) -> None:
        self.server = ThreadingHTTPServer(("127.0.0.1", self.port), self.handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()


@contextmanager
def proxy(statuses: list[int | None], *, started: bool = True) -> Iterator[Proxy]:
    stand_in = Proxy(free_port(), statuses)
    if started:
        stand_in.start()
    try:
        yield stand_in
    finally:
        stand_in.stop()


class StartOnRetry(logging.Handler):
    """Starts the stand-in when the client says it will send the call again: the first attempt
    met a closed port, the next finds it open."""

    def __init__(self, stand_in: Proxy) -> None:
        super().__init__()
        self.stand_in = stand_in

    def emit(self, record: logging.LogRecord) -> None:
        if self.stand_in.server is None and "sent again" in record.getMessage():
            self.stand_in.start()


@pytest.fixture
def sync_retry(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    monkeypatch.setenv("TRL_EXPERIMENTAL_SILENCE", "1")  # read when trl.experimental is imported
    import trainer_entry.sync_retry as module

    return module


def test_a_load_refused_at_first_is_sent_again_once_the_proxy_listens(
    sync_retry: ModuleType, caplog: pytest.LogCaptureFixture
) -> None:
    with proxy([], started=False) as stand_in:
        handler = StartOnRetry(stand_in)
        logging.getLogger("trainer_entry").addHandler(handler)
        try:
            client = sync_retry.RetryingClient(f"http://127.0.0.1:{stand_in.port}")
            client.load_lora_adapter("trl-policy-v3", "/lora/v3", timeout=CALL_TIMEOUT_S)
        finally:
            logging.getLogger("trainer_entry").removeHandler(handler)
    assert stand_in.calls == 1  # the refused attempt never arrived
    assert "load of trl-policy-v3: the proxy could not be reached" in caplog.text


@pytest.mark.parametrize("call", ["load", "unload", "pause", "resume"])
def test_a_sync_call_reset_in_flight_is_sent_again(sync_retry: ModuleType, call: str) -> None:
    with proxy([None]) as stand_in:
        client = sync_retry.RetryingClient(f"http://127.0.0.1:{stand_in.port}")
        {
            "load": lambda: client.load_lora_adapter("v", "/p", timeout=CALL_TIMEOUT_S),
            "unload": lambda: client.unload_lora_adapter("v", timeout=CALL_TIMEOUT_S),
            "pause": lambda: client.pause(timeout=CALL_TIMEOUT_S),
            "resume": lambda: client.resume(timeout=CALL_TIMEOUT_S),
        }[call]()
    assert stand_in.calls == 2


def test_an_answer_is_trl_s_to_judge_and_is_never_sent_twice(sync_retry: ModuleType) -> None:
    with proxy([503]) as stand_in:
        client = sync_retry.RetryingClient(f"http://127.0.0.1:{stand_in.port}")
        with pytest.raises(Exception, match="Request failed: 503"):
            client.load_lora_adapter("v", "/p", timeout=CALL_TIMEOUT_S)
    assert stand_in.calls == 1


def test_the_trainer_s_client_is_swapped_and_pickles_as_trl_s(sync_retry: ModuleType) -> None:
    from trl.experimental.async_grpo.vllm_client import VLLMClient

    trainer = SimpleNamespace(vllm_client=VLLMClient("http://127.0.0.1:9", 7.0))
    sync_retry.install(trainer)
    client = trainer.vllm_client
    assert type(client) is sync_retry.RetryingClient
    assert (client.server_url, client.server_timeout) == ("http://127.0.0.1:9", 7.0)
    again = pickle.loads(pickle.dumps(client))
    assert type(again) is sync_retry.RetryingClient and again.server_url == client.server_url
    other_rank = SimpleNamespace(vllm_client=None)
    sync_retry.install(other_rank)
    assert other_rank.vllm_client is None
