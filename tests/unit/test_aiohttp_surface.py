"""What ``proxy.http.server`` relies on in aiohttp, checked against the installed release.

The guard uses aiohttp's public API only, but leans on how that API behaves: the runner's
``server`` is a protocol factory whose protocols are plain ``asyncio.Protocol`` (so
``GuardedConnection`` can stand in front of one), and a request aiohttp cannot parse reaches the
``logger`` it is given as an ERROR record carrying the ``HttpProcessingError`` (so
``ClientErrorLog``'s filter can count it). An aiohttp upgrade that changes either fails here,
naming the version, before the guard fails in a subtler way. The tested range is pinned in
pyproject.toml (the dev extra).
"""

from __future__ import annotations

import asyncio
import logging

import aiohttp
from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError

from proxy.http.server import GuardedConnection
from tests.support.waiting import wait_for

AIOHTTP = f"aiohttp {aiohttp.__version__}"
CALLBACKS = (
    "connection_made",
    "connection_lost",
    "data_received",
    "eof_received",
    "pause_writing",
    "resume_writing",
)


class Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


async def ok(request: web.BaseRequest) -> web.StreamResponse:
    return web.Response(text="ok")


async def test_the_runner_server_is_a_factory_of_plain_protocols() -> None:
    assert isinstance(vars(web.BaseRunner).get("server"), property), (
        f"{AIOHTTP}: BaseRunner.server is no longer a property (proxy.http.server.serving "
        "passes it to loop.create_server as the protocol factory)"
    )
    runner = web.ServerRunner(web.Server(ok))
    await runner.setup()
    try:
        assert runner.server is not None, f"{AIOHTTP}: BaseRunner.server is None after setup()"
        protocol = runner.server()
        name = type(protocol).__qualname__
        assert isinstance(protocol, asyncio.Protocol), (
            f"{AIOHTTP}: runner.server() made a {name}, not an asyncio.Protocol "
            "(GuardedConnection forwards a Protocol's callbacks)"
        )
        assert not isinstance(protocol, asyncio.BufferedProtocol), (
            f"{AIOHTTP}: runner.server() made a BufferedProtocol ({name}); GuardedConnection "
            "forwards data_received only"
        )
        for callback in CALLBACKS:
            assert callable(getattr(protocol, callback, None)), (
                f"{AIOHTTP}: {name}.{callback} is gone (GuardedConnection forwards it)"
            )
            assert callback in vars(GuardedConnection), callback
    finally:
        await runner.cleanup()


async def test_a_bad_request_reaches_the_logger_as_an_error_with_its_exception() -> None:
    logger = logging.Logger("surface")  # a Logger of its own, as ClientErrorLog is
    records = Records()
    logger.addHandler(records)

    def reported() -> list[logging.LogRecord]:
        return [
            record
            for record in records.records
            if record.levelno >= logging.ERROR
            and record.exc_info
            and isinstance(record.exc_info[1], HttpProcessingError)
        ]

    runner = web.ServerRunner(web.Server(ok, logger=logger))
    await runner.setup()
    assert runner.server is not None
    listener = await asyncio.get_running_loop().create_server(runner.server, "127.0.0.1", 0)
    try:
        port = listener.sockets[0].getsockname()[1]
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET / HTTP/1.1\r\nHost: x\r\nBad Header\r\n\r\n")
        await writer.drain()
        answer = await asyncio.wait_for(reader.read(), 10)
        writer.close()
        assert answer.split(b" ", 2)[1] == b"400", answer[:80]
        try:
            await wait_for(reported, what="the bad request's ERROR record")
        except AssertionError:
            raise AssertionError(
                f"{AIOHTTP} no longer logs a client's unparsable request as an ERROR record "
                "carrying the HttpProcessingError on the server's logger; ClientErrorLog's "
                f"filter (proxy/http/server.py) relies on it. It logged: {records.records!r}"
            ) from None
    finally:
        listener.close()
        await runner.cleanup()
