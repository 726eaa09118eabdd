"""Pushed copies under vLLM's LoRA cache pressure (issue 27, finding 13), with real vLLM.

Each replica holds ``max_loras`` (6) adapters in its CPU cache; registering seven and serving
each in turn makes vLLM evict some and, when one is named again, re-read it from the path it
was loaded from: the receiver's pushed copy. That copy must still be there while the name is
registered, whatever the pressure (the store deletes a name's copies only once vLLM unloaded it),
so every request is served; once a name is unloaded, its copies go.
"""

from __future__ import annotations

import json
import shutil
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from pathlib import Path

from tests.e2e.conftest import MAX_LORAS
from tests.e2e.support import (
    REPLICA_TOKEN,
    VllmServer,
    adapters_listed,
    all_routable,
    loaded_from,
)
from trainer_entry import sidecar

UNLOAD_TIMEOUT_S = 60.0
ADAPTERS = 7  # registered at once: more than the replicas' max_loras (MAX_LORAS)
ROUNDS = 2


def _post(url: str, body: Mapping[str, object], timeout_s: float = 120.0) -> int:
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            return int(response.status)
    except urllib.error.HTTPError as error:
        return int(error.code)


def _copies(server: VllmServer, name: str) -> list[Path]:
    return [path for path in (server.store / name).glob("*/adapter_config.json")]


def test_every_registered_adapter_is_served_while_vllm_evicts_and_reloads(
    clean_fleet: list[VllmServer], tiny: dict[str, Path], tmp_path: Path
) -> None:
    assert ADAPTERS > MAX_LORAS
    watched = tmp_path / ".vllm_lora"
    watched.mkdir()
    names = [f"trl-policy-v{n}" for n in range(1, ADAPTERS + 1)]
    argv = sidecar.sidecar_command(
        [s.url for s in clean_fleet], sidecar.free_port(), watched,
        ("--adapter-window", str(ADAPTERS), "--watch-interval", "3600"),
    )  # fmt: skip
    with sidecar.running(argv, env={"PROXY_UPSTREAM_TOKEN": REPLICA_TOKEN}) as url:
        all_routable(url, len(clean_fleet))
        for name in names:
            shutil.copytree(tiny["adapter"], watched / name)
            body = {"lora_name": name, "lora_path": str(watched / name)}
            assert _post(url + "/v1/load_lora_adapter", body) == 200, name
        for server in clean_fleet:
            assert set(adapters_listed(server.url)) == set(names)
        for _ in range(ROUNDS):
            for name in names:  # each in turn: the cache holds MAX_LORAS, so vLLM evicts, reloads
                prompt = {"model": name, "prompt": "what is 2 plus 2", "max_tokens": 2}
                assert _post(url + "/v1/completions", prompt) == 200, name
        for server in clean_fleet:
            paths = loaded_from(server.log_since_start())
            for name in names:  # loaded from the pushed copy, which is still there
                assert paths.get(name) and all(server.stored(p) for p in paths[name]), name
                assert _copies(server, name), (server.url, name)
        assert _post(url + "/v1/unload_lora_adapter", {"lora_name": names[0]}) == 200
        deadline = time.monotonic() + UNLOAD_TIMEOUT_S
        while any(names[0] in adapters_listed(s.url) or _copies(s, names[0]) for s in clean_fleet):
            assert time.monotonic() < deadline, "the unloaded name's copies are still there"
            time.sleep(0.2)  # the proxy answers once asked; each replica unloads, then drops
        for server in clean_fleet:
            assert _copies(server, names[1])  # only the unloaded name's copies went
