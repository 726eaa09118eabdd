"""The proxy's own adapter receiver (a relay pushes into it) against senders that hang up: the
space an upload reserved is given back, and nothing of it stays on disk (issue: 40 resets of a
1 GiB manifest filled an 8 GiB store in 0.4 s). Real proxy on loopback, bounded counts."""

from __future__ import annotations

import asyncio
import socket
import struct
from pathlib import Path

import aiohttp

from adapter_receiver.wire import PREFIX
from proxy.app import build_app, serve
from proxy.config import Settings
from tests.support.fleet import FAST_HEALTH, run_sim
from tests.support.uploads import listing, manifest_line, put, upload_body
from tests.support.waiting import eventually

MIB = 1 << 20
RESETS = 40


async def _reset_after(url: str, name: str, parts: list[bytes], length: int) -> None:
    """Send a PUT's head and ``parts``, then reset the connection (SO_LINGER 0: an RST, as a
    crashed sender's kernel sends)."""
    host, port = url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    head = f"PUT {PREFIX}/{name} HTTP/1.1\r\nHost: {host}\r\nContent-Length: {length}\r\n\r\n"
    writer.write(head.encode() + b"".join(parts))
    await writer.drain()
    await asyncio.sleep(0)
    sock = writer.get_extra_info("socket")
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.close()
    del reader


async def test_resets_give_back_every_reservation_and_leave_nothing_on_disk(
    tmp_path: Path,
) -> None:
    store = tmp_path / "store"
    async with run_sim() as sim:
        settings = Settings.model_validate(
            {
                "replicas": [sim.url],
                "adapter_store": str(store),
                "adapter_store_max_adapter_bytes": 3 * MIB // 2,
                "adapter_store_max_bytes": 2 * MIB,
                **FAST_HEALTH,
            }
        )
        async with serve(build_app(settings)) as url, aiohttp.ClientSession() as session:
            declared = 6 * MIB // 5  # more than half the store: one leak blocks "fits" below
            big = manifest_line({"adapter_config.json": 16, "adapter_model.safetensors": declared})
            length = len(big) + 16 + declared + 2 * 64
            for i in range(RESETS):  # right after the manifest: while the space is reserved
                await _reset_after(url, f"reset-{i}", [big], length)
            files = {"adapter_config.json": b"{}", "adapter_model.safetensors": b"\0" * 4096}
            body = upload_body(files)
            for i in range(RESETS // 4):  # a whole body, reset before the answer is read
                await _reset_after(url, f"whole-{i}", [body], len(body))

            async def settled() -> bool:
                store_view = await listing(session, url)
                return bool(
                    store_view["bytes"] == sum(e["charged"] for e in store_view["adapters"])
                )

            # The accounting is what is published, nothing reserved: no reset leaked space.
            await eventually(settled, what="every reset upload's reservation given back")
            assert _in_progress(store) == []
            for entry in (await listing(session, url))["adapters"]:
                assert entry["name"].startswith("whole-")  # a whole body may have published
                assert {f["name"] for f in entry["files"]} == set(files)
                assert all((Path(entry["path"]) / n).stat().st_size > 0 for n in files)
            # 900 KiB still fit in the 2 MiB store (after one leaked reservation: 507).
            fits = {"adapter_config.json": b"{}", "adapter_model.safetensors": b"\1" * 900_000}
            status, answer = await put(session, url, "fits", upload_body(fits))
            assert status == 201, answer


def _in_progress(store: Path) -> list[str]:
    tmp = store / ".tmp"
    return sorted(p.name for p in tmp.iterdir()) if tmp.exists() else []
