"""Adapter uploads as a pusher sends them (``adapter_receiver.wire``), for receiver tests; and a
raw HTTP/1.1 client that can stop mid-body or read an answer before its body is sent."""

from __future__ import annotations

import asyncio
import hashlib
import json
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import aiohttp

from adapter_receiver.wire import PREFIX, FileSpec, Manifest


def adapter_files(path: Path) -> dict[str, bytes]:
    """The regular files of an adapter directory, by name."""
    return {p.name: p.read_bytes() for p in sorted(path.iterdir()) if p.is_file()}


def upload_body(
    files: dict[str, bytes],
    origin: str | None = None,
    *,
    digests: dict[str, str] | None = None,
    sizes: dict[str, int] | None = None,
) -> bytes:
    """The whole body of an upload; ``digests``/``sizes`` override what the manifest and the
    trailers say (to send a damaged upload)."""
    declared = sizes or {}
    specs = tuple(FileSpec(name, declared.get(name, len(data))) for name, data in files.items())
    parts = [Manifest(specs, origin).encode()]
    for name, data in files.items():
        digest = (digests or {}).get(name) or hashlib.sha256(data).hexdigest()
        parts += [data, digest.encode()]
    return b"".join(parts)


def manifest_line(files: dict[str, int], origin: str | None = None) -> bytes:
    return Manifest(tuple(FileSpec(n, s) for n, s in files.items()), origin).encode()


async def put(
    session: aiohttp.ClientSession, url: str, name: str, body: bytes, **headers: str
) -> tuple[int, Any]:
    async with session.put(f"{url}{PREFIX}/{name}", data=body, headers=headers) as response:
        raw = await response.read()
        return response.status, json.loads(raw) if raw else None


async def listing(session: aiohttp.ClientSession, url: str, **headers: str) -> Any:
    async with session.get(url + PREFIX, headers=headers) as response:
        assert response.status == 200, await response.text()
        return await response.json()


async def raw_put(
    url: str,
    target: str,
    parts: list[bytes],
    *,
    length: int | None,
    headers: dict[str, str] | None = None,
    hang_up: bool = False,
) -> tuple[int, bytes] | None:
    """PUT ``parts`` with the given Content-Length (None: no header), one write each.

    ``hang_up``: close the connection after the parts instead of reading an answer (None)."""
    split = urlsplit(url)
    reader, writer = await asyncio.open_connection(split.hostname, split.port)
    lines = [f"PUT {target} HTTP/1.1", f"Host: {split.netloc}", "Connection: close"]
    lines += [f"{k}: {v}" for k, v in (headers or {}).items()]
    if length is not None:
        lines.append(f"Content-Length: {length}")
    writer.write(("\r\n".join(lines) + "\r\n\r\n").encode())
    try:
        for part in parts:
            writer.write(part)
            await writer.drain()
        if hang_up:
            return None
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 30)
        status = int(head.split(b" ", 2)[1])
        fields = dict(line.split(b":", 1) for line in head.split(b"\r\n")[1:] if b":" in line)
        size = int(fields.get(b"content-length", fields.get(b"Content-Length", b"0")))
        return status, await asyncio.wait_for(reader.readexactly(size), 30)
    finally:
        writer.close()
