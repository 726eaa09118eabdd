"""A benchmark's child processes leave nothing in the temp directory: each runs with a
``TMPDIR`` of its own, removed when it is stopped (``benchmarks.harness.procs``). A proxy on a
fixed port keeps its adapter store and state there, per port, to outlive a restart: a
benchmark's throwaway proxies left one pair per run (hundreds on a machine that ran them)."""

from __future__ import annotations

import tempfile
from pathlib import Path

from benchmarks.harness.procs import start_child, start_proxy, stop_child
from replica_entry.sim.loopback import free_port


def _ours() -> set[str]:
    return {path.name for path in Path(tempfile.gettempdir()).glob("rollout-*")}


async def test_a_stopped_proxy_leaves_no_store_or_state_behind() -> None:
    before = _ours()
    port = free_port()
    replica = await start_child("fast replica", "benchmarks.harness.fast_replica",
                                ["--port", str(port)], port)  # fmt: skip
    proxy = await start_proxy([replica.url])
    try:
        assert proxy.scratch is not None and replica.scratch is not None
        kept = {path.name for path in proxy.scratch.iterdir()}
        port_of_proxy = proxy.url.rsplit(":", 1)[1]
        # the proxy made its per-port adapter store (its state comes with the first version),
        # in its own directory, not the shared one
        assert f"rollout-proxy-{port_of_proxy}-adapters" in kept, kept
        assert _ours() - before == {proxy.scratch.name, replica.scratch.name}
    finally:
        await stop_child(proxy)
        await stop_child(replica)
    assert not proxy.scratch.exists() and not replica.scratch.exists()
    assert _ours() == before
