"""The transport floor: a bare aiohttp + uvloop pass-through to the replicas, taken in turn.

Reads the body, POSTs it upstream on one pooled keep-alive session, returns the body: what any
aiohttp proxy pays before it does anything useful. An answer with a Content-Length is read whole
and sent in one write; any other (a chunked stream of server-sent events) is copied to the
client chunk by chunk as each arrives (one write per upstream HTTP chunk, as the proxy writes a
stream), so the same bytes cost the floor what they would cost any aiohttp streaming proxy.
The overhead suite compares the proxy to it,
in front of the same replicas: at light load, answers from several replicas arrive apart and
each costs its own loop wake-up, so a floor with one upstream would be cheaper for a reason that
has nothing to do with the proxy's code.

    python -m benchmarks.harness.passthrough --port 9300 --upstream http://127.0.0.1:9201,http://127.0.0.1:9202
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import signal

import aiohttp
from aiohttp import web

UPSTREAMS: web.AppKey[itertools.cycle[str]] = web.AppKey("upstreams")
SESSION = web.AppKey("session", aiohttp.ClientSession)


async def forward(request: web.Request) -> web.StreamResponse:
    body = await request.read()
    session = request.app[SESSION]
    upstreams = request.app[UPSTREAMS]
    async with session.request(
        request.method,
        next(upstreams) + request.path_qs,
        data=body,
        headers={"Content-Type": "application/json"},
    ) as up:
        if up.content_length is not None:
            data = await up.read()
            return web.Response(body=data, status=up.status, content_type="application/json")
        kind = up.headers.get("Content-Type", "application/json")
        response = web.StreamResponse(status=up.status, headers={"Content-Type": kind})
        await response.prepare(request)
        async for chunk, _ in up.content.iter_chunks():
            await response.write(chunk)
        await response.write_eof()
        return response


async def serve(port: int, upstreams: list[str]) -> None:
    app = web.Application()
    app[UPSTREAMS] = itertools.cycle(upstreams)
    app[SESSION] = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))
    app.router.add_route("*", "/{tail:.*}", forward)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port, backlog=4096).start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    print(f"passthrough ready on http://127.0.0.1:{port}", flush=True)
    await stop.wait()
    await app[SESSION].close()
    await runner.cleanup()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.harness.passthrough", allow_abbrev=False
    )
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument(
        "--upstream", required=True, help="URL[,URL...]: more than one are taken in turn"
    )
    args = parser.parse_args(argv)
    import uvloop

    uvloop.run(serve(args.port, args.upstream.split(",")))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
