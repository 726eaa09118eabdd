"""The generation path's keep-alive client against scripted HTTP servers on loopback
(``tests.support.scripted``: each answer written in the pieces the test chooses)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from proxy.upstream import connpool
from proxy.upstream.client import KEEPALIVE_S
from proxy.upstream.connpool import ConnectionPool
from proxy.upstream.errors import AnswerTimeout, BadAnswer, ConnectError, Disconnected, Dropped
from tests.support.scripted import ok, scripted
from tests.support.waiting import wait_for


def pool(**kwargs: float) -> ConnectionPool:
    settings = {"connect_timeout_s": 2.0, "request_timeout_s": 5.0, "idle_s": KEEPALIVE_S, **kwargs}
    return ConnectionPool(**settings)  # type: ignore[arg-type]


async def post(p: ConnectionPool, url: str, body: bytes = b'{"x": 1}') -> tuple[int, bytes]:
    async with p.request(url, "POST", "/v1/completions", body, "application/json") as answer:
        return answer.status, await answer.read()


async def test_a_request_goes_out_as_given_and_the_connection_is_reused() -> None:
    body = b'{"model": "m", "prompt": [1, 2, 3]}'
    async with scripted(lambda n: [ok(b"answer %d" % n)]) as server:
        p = ConnectionPool(
            connect_timeout_s=2,
            request_timeout_s=5,
            idle_s=KEEPALIVE_S,
            headers={"Authorization": "Bearer t0k"},
        )
        for n in (1, 2, 3):
            assert await post(p, server.url + "/prefix/", body) == (200, b"answer %d" % n)
        p.close()
    assert server.connections == 1 and p.opened == 1
    head, _, sent = server.requests[0].partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    assert lines[0] == b"POST /prefix/v1/completions HTTP/1.1"
    port = server.url.rsplit(":", 1)[1].encode()
    assert b"Host: 127.0.0.1:" + port in lines
    assert b"Authorization: Bearer t0k" in lines
    assert b"Content-Length: %d" % len(body) in lines
    assert b"Content-Type: application/json" in lines
    assert sent == body


async def test_an_answer_split_into_single_bytes_is_read_whole() -> None:
    answer = ok(b'{"choices": []}', b"Content-Type: application/json\r\nX-Extra:  v \r\n")
    async with scripted(lambda n: [answer[i : i + 1] for i in range(len(answer))]) as server:
        p = pool()
        async with p.request(server.url, "POST", "/v1/completions", b"{}", "x/y") as a:
            assert (a.status, a.content_length) == (200, 15)
            assert a.headers["content-type"] == "application/json"
            assert a.headers["x-extra"] == "v"
            assert await a.read() == b'{"choices": []}'
        assert await post(p, server.url) == (200, b'{"choices": []}')
        p.close()
    assert p.opened == 1


CHUNKED = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
    b"6\r\ndata: \r\n"
    b"1A;ext=1\r\n" + b"{" + b"x" * 24 + b"}\r\n"
    b"0\r\nX-Trailer: t\r\n\r\n"
)


@pytest.mark.parametrize("cut", [1, 7, 40, 91, len(CHUNKED) - 3])
async def test_chunked_answers_are_decoded_across_any_split(cut: int) -> None:
    async with scripted(lambda n: [CHUNKED[:cut], CHUNKED[cut:]]) as server:
        p = pool()
        for _ in range(2):
            async with p.request(server.url, "POST", "/v1/completions", b"{}", "x/y") as a:
                assert a.content_length is None
                parts = [part async for part in a.chunks()]
            assert b"".join(parts) == b"data: {" + b"x" * 24 + b"}"
        p.close()
    assert p.opened == 1


async def test_an_answer_without_length_ends_with_the_connection() -> None:
    async with scripted(lambda n: [b"HTTP/1.0 200 OK\r\n\r\nuntil close"], close_after=1) as s:
        p = pool()
        async with p.request(s.url, "POST", "/x", b"", "x/y") as a:
            assert [part async for part in a.chunks()] == [b"until close"]
        assert p.idle == 0
        p.close()


async def test_a_keep_alive_the_replica_closed_while_idle_is_not_used() -> None:
    async with scripted(lambda n: [ok(b"n%d" % n)], close_after=1) as server:
        p = pool()
        assert await post(p, server.url) == (200, b"n1")
        await wait_for(lambda: p.idle == 1)
        # The server's close has happened (the next poll round delivers it to the pool's idle
        # connection; were it late, the request would meet the close and be sent again).
        await wait_for(lambda: server.closed_by_server == 1, what="the server's close")
        assert await post(p, server.url) == (200, b"n2")
        p.close()
    assert server.connections == 2 and p.opened == 2


async def test_a_request_that_meets_the_close_of_a_keep_alive_is_sent_again() -> None:
    async with scripted(lambda n: [ok(b"n%d" % n)], drop=frozenset({2})) as server:
        p = pool()
        assert await post(p, server.url) == (200, b"n1")
        # Request 2 goes out on the kept-alive connection; the server closes it unanswered.
        assert await post(p, server.url) == (200, b"n3")
        p.close()
    assert server.connections == 2 and p.opened == 2


async def test_a_fresh_connection_closed_unanswered_is_an_error_not_retried() -> None:
    async with scripted(lambda n: [], drop=frozenset({1, 2})) as server:
        p = pool()
        with pytest.raises(Disconnected, match="closed before any answer"):
            await post(p, server.url)
        p.close()
    assert len(server.requests) == 1


async def test_an_answer_cut_short_is_an_error_not_retried() -> None:
    cut = b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nonly part"
    async with scripted(lambda n: [cut], close_after=1) as server:
        p = pool()
        with pytest.raises(Disconnected, match="closed by the replica"):
            await post(p, server.url)
        p.close()
    assert len(server.requests) == 1


@pytest.mark.parametrize(
    ("answer", "match"),
    [
        (b"SSH-2.0-OpenSSH\r\n\r\n", "Expected HTTP/"),
        (b"HTTP/1.1 200 OK\r\nno colon here\r\n\r\n", "Invalid header token"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n", "Invalid character in Content-Length"),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n", "unsupported Transfer-Encoding"),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", "chunk size"),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nab\r\n", "after chunk data"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nab", "bytes after a complete answer"),
        (b"HTTP/1.1 101 Switching Protocols\r\n\r\n", "unexpected status 101"),
        (b"HTTP/1.1 200 OK\r\nX: " + b"a" * 70_000 + b"\r\n\r\n", "longer than"),
    ],
)
async def test_garbage_is_a_clear_error_and_the_connection_is_dropped(
    answer: bytes, match: str
) -> None:
    async with scripted(lambda n: [answer]) as server:
        p = pool()
        with pytest.raises(BadAnswer, match=match):
            async with p.request(server.url, "POST", "/x", b"{}", "x/y") as a:
                await a.read()
        assert p.idle == 0
        p.close()


async def test_a_silent_replica_times_out_and_the_connection_is_dropped() -> None:
    async with scripted(lambda n: [b"HTTP/1.1 200 OK\r\n"]) as server:
        p = pool(request_timeout_s=0.3)
        started = asyncio.get_running_loop().time()
        with pytest.raises(TimeoutError):
            await post(p, server.url)
        assert asyncio.get_running_loop().time() - started < 2
        await wait_for(lambda: server.closed_by_client == 1, what="the server sees the close")
        p.close()


async def test_leaving_with_the_body_unread_closes_the_connection() -> None:
    stream = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nfirst\r\n"
    async with scripted(lambda n: [stream]) as server:
        p = pool()
        async with p.request(server.url, "POST", "/x", b"{}", "x/y") as a:
            async for part in a.chunks():
                assert part == b"first"
                break
        await wait_for(lambda: server.closed_by_client == 1, what="the server sees the close")
        assert p.idle == 0
        p.close()


async def test_idle_connections_are_closed_after_the_keep_alive_time() -> None:
    async with scripted(lambda n: [ok(b"x")]) as server:
        p = pool(idle_s=0.1)
        await asyncio.gather(*(post(p, server.url) for _ in range(3)))
        assert p.idle == 3
        await wait_for(lambda: p.idle == 0, what="idle connections swept")
        await wait_for(lambda: server.closed_by_client == 3, what="the server sees the closes")
        p.close()


async def test_a_large_streamed_body_arrives_intact_to_a_slow_reader() -> None:
    payload = bytes(range(256)) * 4096 * 6  # 6 MiB, more than the read-pause threshold
    pieces = [payload[i : i + 65536] for i in range(0, len(payload), 65536)]
    chunks = b"".join(b"%x\r\n%s\r\n" % (len(c), c) for c in pieces)
    head = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
    async with scripted(lambda n: [head, chunks, b"0\r\n\r\n"]) as server:
        p = pool()
        received = bytearray()
        async with p.request(server.url, "POST", "/x", b"{}", "x/y") as a:
            async for part in a.chunks():
                received += part
                await asyncio.sleep(0)
        assert received == payload
        assert p.idle == 1
        p.close()


async def test_a_large_whole_body_is_read_without_stalling() -> None:
    payload = b"z" * (6 << 20)
    async with scripted(lambda n: [ok(payload)]) as server:
        p = pool()
        assert await post(p, server.url) == (200, payload)
        assert p.idle == 1
        p.close()


async def test_a_refused_connection_is_a_connect_error() -> None:
    async with scripted(lambda n: []) as server:
        url = server.url
    p = pool()
    with pytest.raises(ConnectError, match=r"cannot connect to http://127\.0\.0\.1"):
        await post(p, url)
    p.close()


async def test_a_drop_fails_the_answers_still_due_and_leaves_settled_ones() -> None:
    stream = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nfirst\r\n"
    silent = b"HTTP/1.1 200 OK\r\n"  # a head begun, never finished: an answer still due
    async with scripted(
        lambda n: [ok(b"whole")] if n == 1 else [stream] if n == 2 else [silent]
    ) as server:
        p = pool(request_timeout_s=60)
        assert await post(p, server.url) == (200, b"whole")  # now an idle keep-alive
        async with p.request(server.url, "POST", "/x", b"{}", "x/y") as settled:
            settled.settle()
            due = asyncio.create_task(post(p, server.url))
            await wait_for(lambda: len(server.requests) == 3, what="the third request sent")
            assert p.drop(server.url, "gone") == 2  # the stream's and the silent one's
            with pytest.raises(Dropped, match="gone"):
                await asyncio.wait_for(due, 5)
            assert not settled.closed
            await wait_for(lambda: server.closed_by_client == 1, what="the dropped one closed")
        assert p.drop("http://127.0.0.1:1", "never used") == 0
        p.close()


async def test_a_connect_under_way_when_its_replica_is_dropped_fails_too() -> None:
    async with scripted(lambda n: [ok(b"x")]) as server:
        p = pool()
        assert await post(p, server.url) == (200, b"x")  # the origin is known
        p.close()  # no idle connection: the next request connects
        sending = asyncio.create_task(post(p, server.url))
        await asyncio.sleep(0)  # the task runs up to its connect, which needs the loop
        p.drop(server.url, "ejected")  # before the connect has finished
        with pytest.raises(Dropped, match="ejected"):
            await asyncio.wait_for(sending, 5)
        assert await post(p, server.url) == (200, b"x")  # a later connect is not affected
        p.close()


class GatedDials:
    """``dial`` with every connect held until ``gate`` is set: how many are under way at once."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.gate = asyncio.Event()
        self.now = 0
        self.most = 0
        real = connpool.dial  # type: ignore[attr-defined]

        async def dial(*args: Any) -> Any:
            self.now += 1
            self.most = max(self.most, self.now)
            try:
                await self.gate.wait()
                return await real(*args)
            finally:
                self.now -= 1

        monkeypatch.setattr(connpool, "dial", dial)


async def test_a_burst_opens_at_most_max_connecting_connections_at_once_and_reuses_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Thirty requests at once to one replica, at most three connects under way: the rest wait
    at the proxy for a connect slot or a released connection (handed over), and every one is
    answered. Fails on a pool that opens a connection per request at once (a burst then
    overflows the replica's accept queue, issue 48)."""
    dials = GatedDials(monkeypatch)
    async with scripted(lambda n: [ok(b"answer")]) as server:
        p = pool(max_connecting=3)
        burst = [asyncio.create_task(post(p, server.url)) for _ in range(30)]
        await wait_for(lambda: p.waiting(server.url) == 27, what="27 requests waiting")
        assert dials.now == 3
        dials.gate.set()
        answers = await asyncio.gather(*burst)
        p.close()
    assert answers == [(200, b"answer")] * 30
    assert dials.most == 3 and p.opened <= 30


async def test_control_calls_never_wait_behind_the_bound_and_drop_fails_the_waiters(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With the data lane at its bound (one connect held, two requests waiting), a control
    call opens its own connection at once; dropping the replica fails the waiting requests
    with ``Dropped`` (they fail over) and the control call still completes."""
    dials = GatedDials(monkeypatch)
    async with scripted(lambda n: [ok(b"answer")], replica=True) as server:
        p = pool(max_connecting=1)
        data = [asyncio.create_task(post(p, server.url)) for _ in range(3)]
        await wait_for(lambda: p.waiting(server.url) == 2, what="two requests waiting")

        async def probe() -> int:
            async with p.control(server.url, "GET", "/health", None, timeout_s=5, connect_s=5) as a:
                await a.read()
                return a.status

        control = asyncio.create_task(probe())
        await wait_for(lambda: dials.now == 2, what="the control connect beside the data one")
        assert p.drop(server.url, "ejected") == 0
        for waiting in data[1:]:
            with pytest.raises(Dropped):
                await waiting
        dials.gate.set()
        assert await control == 200
        with pytest.raises(Dropped):  # its connect ended after the drop: given up too
            await data[0]
        p.close()


async def test_a_request_waiting_for_a_connection_ends_at_its_own_time_limit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The wait for a connection counts against the request's time limit: ``AnswerTimeout``
    (slow, not a failed replica: nothing is ejected for it)."""
    dials = GatedDials(monkeypatch)
    async with scripted(lambda n: [ok(b"answer")]) as server:
        p = pool(max_connecting=1, request_timeout_s=0.2)
        held = asyncio.create_task(post(p, server.url))
        await wait_for(lambda: dials.now == 1, what="the first request's connect held")
        with pytest.raises(AnswerTimeout):
            await post(p, server.url)
        assert p.waiting(server.url) == 0  # it left the line
        held.cancel()
        with pytest.raises(asyncio.CancelledError):
            await held
        p.close()
