"""The adapter mirror's cost: ``python -m benchmarks.sync.mirror [--versions N] [--size-mb MB]``.

For each of N versions (TRL's layout: ``adapter_config.json`` and a ``--size-mb`` weights file,
written to a staging folder and renamed into place, as ``save_lora_adapter`` does) on this
machine's disk, the time from the version first seen (``Mirror.saw``, as TRL's load calls it)
to its snapshot taken (hard links under ``<local>/.mirror``: what TRL's load waits for), and to
its copy landed in the mirror directory (``<mirror>/.<name>.tmp`` copied, renamed: what a
replica without a receiver waits for). Both directories are on the same local disk here: a
bucket mount's write rate adds to "landed" only, never to "snapshot".
"""

from __future__ import annotations

import asyncio
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from proxy.adapters.mirror import Mirror
from proxy.adapters.registry import Version
from proxy.clock import RealClock
from proxy.config.programs import OneLineParser, help_text


def _write(local: Path, name: str, size: int) -> None:
    staging = local / f".{name}.tmp"
    staging.mkdir()
    (staging / "adapter_config.json").write_text('{"peft_type": "LORA", "r": 1}')
    (staging / "adapter_model.safetensors").write_bytes(os.urandom(size))
    os.rename(staging, local / name)


def _failed(task: str, exc: BaseException) -> None:
    raise exc


async def measure(versions: int, size: int, root: Path) -> dict[str, list[float]]:
    local, bucket = root / "local", root / "bucket" / ".vllm_lora"
    local.mkdir()
    clock = RealClock()
    mirror = Mirror(local, bucket, clock, _failed, interval_s=3600.0)
    worker = asyncio.create_task(mirror.work())
    snapshot: list[float] = []
    landed: list[float] = []
    try:
        for n in range(1, versions + 1):
            name = f"trl-policy-v{n}"
            await asyncio.to_thread(_write, local, name, size)
            started = time.perf_counter()
            await mirror.saw(name)
            snapshot.append(time.perf_counter() - started)
            version = Version(name, str(local / name), "client", mount=mirror.target(name))
            assert await mirror.mounted(version, clock.monotonic() + 60)
            landed.append(time.perf_counter() - started)
    finally:
        worker.cancel()
        await asyncio.gather(worker, return_exceptions=True)
    return {"snapshot": snapshot, "landed": landed}


def _line(what: str, values: list[float]) -> str:
    ms = sorted(v * 1000 for v in values)
    p90 = ms[min(len(ms) - 1, int(0.9 * len(ms)))]
    return f"{what:9} p50 {statistics.median(ms):7.2f} ms  p90 {p90:7.2f} ms  max {ms[-1]:7.2f} ms"


def main(argv: list[str] | None = None) -> int:
    parser = OneLineParser(prog="python -m benchmarks.sync.mirror", description=help_text(__doc__))
    parser.add_argument("--versions", type=int, default=50)
    parser.add_argument("--size-mb", type=float, default=5.0)
    parser.add_argument("--dir", type=Path, default=None, help="where (default: a temp dir)")
    args = parser.parse_args(argv)
    root = Path(tempfile.mkdtemp(prefix="mirror-bench-", dir=args.dir))
    try:
        times = asyncio.run(measure(args.versions, int(args.size_mb * (1 << 20)), root))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(f"{args.versions} versions of {args.size_mb:g} MB, first seen to:")
    print(_line("snapshot", times["snapshot"]))
    print(_line("landed", times["landed"]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
