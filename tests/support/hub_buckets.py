"""The Storage Buckets half of the Hub stand-in, and the Xet storage (CAS) an upload goes through.

Routes as huggingface_hub (1.24 to 2.4) and hf_xet (1.8) call them (``hf_api.py``:
``create_bucket``, ``bucket_info``, ``_batch_bucket_files``; ``utils/_xet.py``; xet-core's
``RemoteClient`` and its own local CAS server):

- ``POST /api/buckets/{ns}/{name}``: create; the body carries ``private`` (huggingface_hub 1.x)
  or ``visibility`` (2.x); an existing bucket answers 409 and keeps its visibility;
- ``GET /api/buckets/{ns}/{name}``: ``bucket_info`` (``private``, ``size``, ``totalFiles``);
- ``GET /api/buckets/{ns}/{name}/xet-write-token``: a CAS access token, as JSON
  (``accessToken``, ``exp``, ``casUrl``: what hf_xet reads) and as ``X-Xet-*`` headers;
- ``POST /api/buckets/{ns}/{name}/batch``: NDJSON ``addFile``/``deleteFile`` lines; a file is
  added only if the CAS knows its ``xetHash`` (from an uploaded shard), else it is listed under
  ``failed`` (status 200 when some succeeded, 422 when none did).

The CAS is a server of its own (``build_cas_app``; the token's ``casUrl`` points at it), as in
production. It refuses any request without the access token, offers no upload grants (404 on
``/v1/xorb-grants``: hf_xet then uses the plain xorb upload), no global dedup (404 on
``/v1/chunks``), stores xorbs, and reads every shard (``/v2/shards`` answers NDJSON progress;
``/v1/shards`` and hf_xet 1.5's ``/shards`` answer JSON) to learn which chunks make each file,
so ``Buckets.read`` returns the bytes a client uploaded. ``fail`` makes one route answer an
error status, to test how failures surface.
"""

from __future__ import annotations

import datetime
import json
import secrets
import time
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from aiohttp.typedefs import Handler

from tests.support.xet_format import FormatError, Segment, shard_files, xorb_chunks

TOKEN_LIFETIME_S = 3600


@dataclass
class BucketFile:
    path: str
    xet_hash: str
    size: int
    mtime: int | None


@dataclass
class Bucket:
    private: bool
    created_at: str
    files: dict[str, BucketFile] = field(default_factory=dict)


@dataclass
class Buckets:
    """Buckets, the CAS behind them, and the failures a test asked for."""

    cas_url: str = ""
    buckets: dict[str, Bucket] = field(default_factory=dict)
    xorbs: dict[str, bytes] = field(default_factory=dict)
    files: dict[str, list[Segment]] = field(default_factory=dict)
    cas_tokens: dict[str, str] = field(default_factory=dict)  # access token -> bucket id
    failures: dict[str, tuple[int, str]] = field(default_factory=dict)
    requests: list[str] = field(default_factory=list)  # "METHOD path" of every CAS request

    def create(self, bucket_id: str, *, private: bool) -> Bucket:
        bucket = Bucket(private, _iso(datetime.datetime.now(datetime.UTC)))
        self.buckets[bucket_id] = bucket
        return bucket

    def fail(self, route: str, status: int, message: str) -> None:
        """Answer ``status`` with ``message`` on ``route``: ``xet-write-token``, ``xorbs``,
        ``shards`` or ``batch``."""
        self.failures[route] = (status, message)

    def read(self, bucket_id: str, path: str) -> bytes:
        """The bytes of a file in a bucket, put back together from the chunks the CAS holds."""
        entry = self.buckets[bucket_id].files[path]
        out = bytearray()
        for segment in self.files[entry.xet_hash]:
            out += b"".join(xorb_chunks(self.xorbs[segment.xorb])[segment.start : segment.end])
        return bytes(out)


BUCKETS = web.AppKey("buckets", Buckets)


def add_bucket_routes(app: web.Application, buckets: Buckets) -> None:
    app[BUCKETS] = buckets
    app.router.add_post("/api/buckets/{ns}/{name}", _create)
    app.router.add_get("/api/buckets/{ns}/{name}", _info)
    app.router.add_get("/api/buckets/{ns}/{name}/xet-write-token", _write_token)
    app.router.add_post("/api/buckets/{ns}/{name}/batch", _batch)


def build_cas_app(buckets: Buckets) -> web.Application:
    app = web.Application(middlewares=[_require_cas_token], client_max_size=256 * 1024 * 1024)
    app[BUCKETS] = buckets
    app.router.add_get("/v1/chunks/{prefix}/{hash}", _not_found)
    app.router.add_post("/v1/xorb-grants/{prefix}/{hash}", _not_found)
    app.router.add_head("/v1/xorbs/{prefix}/{hash}", _head_xorb)
    app.router.add_post("/v1/xorbs/{prefix}/{hash}", _post_xorb)
    app.router.add_post("/v1/shards", _post_shard_v1)
    app.router.add_post("/shards", _post_shard_v1)  # hf_xet up to 1.5 posts shards here
    app.router.add_post("/v2/shards", _post_shard_v2)
    app.router.add_post("/v1/telemetry", _telemetry)
    return app


def _iso(moment: datetime.datetime) -> str:
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _bucket_id(request: web.Request) -> str:
    return f"{request.match_info['ns']}/{request.match_info['name']}"


def _bucket(request: web.Request) -> Bucket:
    bucket = request.app[BUCKETS].buckets.get(_bucket_id(request))
    if bucket is None:
        raise web.HTTPNotFound(
            text=json.dumps({"error": "Bucket not found"}),
            content_type="application/json",
            headers={"X-Error-Code": "RepoNotFound"},
        )
    return bucket


def _injected(request: web.Request, route: str) -> web.Response | None:
    failure = request.app[BUCKETS].failures.get(route)
    if failure is None:
        return None
    status, message = failure
    return web.json_response({"error": message}, status=status)


async def _create(request: web.Request) -> web.Response:
    buckets = request.app[BUCKETS]
    bucket_id = _bucket_id(request)
    url = f"{request.url.origin()}/buckets/{bucket_id}"
    if bucket_id in buckets.buckets:
        return web.json_response(
            {"error": "You already created this bucket", "url": url}, status=409
        )
    body = await request.json() if request.can_read_body else {}
    private = body.get("visibility") == "private" or body.get("private") is True
    buckets.create(bucket_id, private=private)
    return web.json_response({"url": url, "name": bucket_id, "id": bucket_id})


async def _info(request: web.Request) -> web.Response:
    bucket = _bucket(request)
    return web.json_response(
        {
            "id": _bucket_id(request),
            "private": bucket.private,
            "createdAt": bucket.created_at,
            "size": sum(entry.size for entry in bucket.files.values()),
            "totalFiles": len(bucket.files),
        }
    )


async def _write_token(request: web.Request) -> web.Response:
    _bucket(request)
    if (failed := _injected(request, "xet-write-token")) is not None:
        return failed
    buckets = request.app[BUCKETS]
    token = f"xet_{secrets.token_hex(8)}"
    buckets.cas_tokens[token] = _bucket_id(request)
    expires = int(time.time()) + TOKEN_LIFETIME_S
    return web.json_response(
        {"accessToken": token, "exp": expires, "casUrl": buckets.cas_url},
        headers={
            "X-Xet-Cas-Url": buckets.cas_url,
            "X-Xet-Access-Token": token,
            "X-Xet-Token-Expiration": str(expires),
        },
    )


async def _batch(request: web.Request) -> web.Response:
    bucket = _bucket(request)
    if (failed := _injected(request, "batch")) is not None:
        return failed
    buckets = request.app[BUCKETS]
    lines = [json.loads(line) for line in (await request.text()).splitlines() if line.strip()]
    failures = []
    for operation in lines:
        path = operation.get("path", "")
        kind = operation.get("type")
        if kind == "addFile":
            xet_hash = operation.get("xetHash") or ""
            segments = buckets.files.get(xet_hash)
            if segments is None:
                failures.append({"path": path, "error": f"Xet hash {xet_hash} not found"})
                continue
            size = sum(segment.size for segment in segments)
            bucket.files[path] = BucketFile(path, xet_hash, size, operation.get("mtime"))
        elif kind == "deleteFile":
            bucket.files.pop(path, None)
        else:
            failures.append({"path": path, "error": f"{kind} is not served by the stand-in"})
    body = {
        "success": not failures,
        "processed": len(lines),
        "succeeded": len(lines) - len(failures),
        "failed": failures,
    }
    return web.json_response(body, status=422 if lines and len(failures) == len(lines) else 200)


@web.middleware
async def _require_cas_token(request: web.Request, handler: Handler) -> web.StreamResponse:
    buckets = request.app[BUCKETS]
    buckets.requests.append(f"{request.method} {request.path}")
    scheme, _, token = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() != "bearer" or token not in buckets.cas_tokens:
        return web.Response(status=401, text="invalid or missing CAS access token")
    return await handler(request)


async def _not_found(request: web.Request) -> web.Response:
    return web.Response(status=404, text="Not Found")


async def _telemetry(request: web.Request) -> web.Response:
    await request.read()
    return web.Response(status=200)


async def _head_xorb(request: web.Request) -> web.Response:
    known = request.match_info["hash"] in request.app[BUCKETS].xorbs
    return web.Response(status=200 if known else 404)


async def _post_xorb(request: web.Request) -> web.Response:
    if (failed := _injected(request, "xorbs")) is not None:
        return failed
    buckets = request.app[BUCKETS]
    data = await request.read()
    try:
        xorb_chunks(data)
    except FormatError as exc:
        return web.Response(status=400, text=f"malformed xorb: {exc}")
    key = request.match_info["hash"]
    inserted = key not in buckets.xorbs
    buckets.xorbs[key] = data
    return web.json_response({"was_inserted": inserted})


def _register_shard(buckets: Buckets, data: bytes) -> str | None:
    """Learn the shard's files; the reason it is refused, or None."""
    try:
        files = shard_files(data)
    except FormatError as exc:
        return f"malformed shard: {exc}"
    for file_hash, segments in files.items():
        for segment in segments:
            xorb = buckets.xorbs.get(segment.xorb)
            if xorb is None:
                return f"file {file_hash} refers to xorb {segment.xorb}, never uploaded"
            if segment.end > len(xorb_chunks(xorb)):
                return f"file {file_hash} refers to chunks beyond xorb {segment.xorb}"
    buckets.files.update(files)
    return None


async def _post_shard_v1(request: web.Request) -> web.Response:
    if (failed := _injected(request, "shards")) is not None:
        return failed
    refused = _register_shard(request.app[BUCKETS], await request.read())
    if refused is not None:
        return web.Response(status=400, text=refused)
    return web.json_response({"result": 1})


async def _post_shard_v2(request: web.Request) -> web.Response:
    if (failed := _injected(request, "shards")) is not None:
        return failed
    refused = _register_shard(request.app[BUCKETS], await request.read())
    frames: list[dict[str, Any]] = [{"type": "validating", "verified": 0, "total": 1}]
    if refused is None:
        frames += [{"type": "validating", "verified": 1, "total": 1}, {"type": "result"}]
    else:
        frames.append({"type": "error", "message": refused, "retryable": False})
    body = "".join(json.dumps(frame) + "\n" for frame in frames)
    return web.Response(text=body, content_type="application/x-ndjson")
