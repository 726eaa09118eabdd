"""What a directory source reports as a version: complete directories only, never TRL's staging
directory (``.<name>.tmp``, renamed into place when the save is done)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from proxy.adapters.sources import DirectorySource
from tests.support.adapters import write_adapter


async def test_a_save_in_progress_is_not_a_version(tmp_path: Path) -> None:
    source = DirectorySource(tmp_path, interval_s=1.0)
    write_adapter(tmp_path, "trl-policy-v1")
    staging = Path(write_adapter(tmp_path, ".trl-policy-v2.tmp"))  # complete, not yet renamed
    assert sorted(await source.scan()) == ["trl-policy-v1"]
    await asyncio.to_thread(staging.rename, tmp_path / "trl-policy-v2")  # TRL's rename
    found = await source.scan()
    assert sorted(found) == ["trl-policy-v1", "trl-policy-v2"]
    assert found["trl-policy-v2"][0] == str((tmp_path / "trl-policy-v2").absolute())
