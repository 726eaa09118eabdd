"""A local stand-in of the Hub's bucket listing API, for the real huggingface_hub client.

``GET /api/buckets/{namespace}/{bucket}/tree[/{prefix}]?recursive=true`` lists the files of a
directory on this machine as the Hub lists a bucket's files (``type``, ``path``, ``size``,
``xetHash``, ``mtime``). Requests are counted so tests can wait for a poll.
"""

from __future__ import annotations

import datetime
import hashlib
import os
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from aiohttp import web

BUCKET_ROOT = web.AppKey("bucket_root", Path)
LISTINGS = web.AppKey("listings", list)


def build_hub_app(root: Path) -> web.Application:
    app = web.Application()
    app[BUCKET_ROOT] = root
    app[LISTINGS] = []
    app.router.add_get("/api/buckets/{namespace}/{bucket}/tree", _tree)
    app.router.add_get("/api/buckets/{namespace}/{bucket}/tree/{prefix:.+}", _tree)
    return app


async def _tree(request: web.Request) -> web.Response:
    root = request.app[BUCKET_ROOT] / request.match_info["namespace"] / request.match_info["bucket"]
    prefix = unquote(request.match_info.get("prefix", "")).strip("/")
    request.app[LISTINGS].append(prefix)
    base = root / prefix if prefix else root
    items: list[dict[str, Any]] = []
    for directory, _, names in os.walk(base):
        for name in sorted(names):
            path = Path(directory) / name
            stat = path.stat()
            mtime = datetime.datetime.fromtimestamp(stat.st_mtime, datetime.UTC)
            items.append(
                {
                    "type": "file",
                    "path": str(path.relative_to(root)),
                    "size": stat.st_size,
                    "xetHash": hashlib.sha256(str(path).encode()).hexdigest(),
                    "mtime": mtime.isoformat().replace("+00:00", "Z"),
                }
            )
    return web.json_response(items)
