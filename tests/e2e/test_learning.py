"""A run through the fleet learns, with a lying replica in it: ``python -m benchmarks learn``'s
fleet leg (real TRL, two real vLLM CPU servers, the proxy beside the trainer), one server behind
a shim that acknowledges every adapter and answers every request for one with the base model, as
a data-parallel deployment that drops the adapter does (TRL #7017).

The proxy's probe finds the shim's replica serving another policy than each version's reference
and withholds it (logged, naming it), so every rollout of every version comes from the honest
replica; the run learns as the benchmark's verdict defines it (the last 5 steps' mean reward over
the first 5's by three times their spread, TRL's ``kl`` under its bound at every step but a tenth:
a step's kl can rest on one token's ratio, ``benchmarks.learn.verdict``). The shim's own counts
are checked first: they say whether a rollout reached the lying replica, which TRL's figures
cannot."""

from __future__ import annotations

import json
import re
import urllib.request
from pathlib import Path

from benchmarks.learn.cli import LEG_TIMEOUT_S, prepare, settings_for
from benchmarks.learn.legs import FLEET, run_leg
from benchmarks.learn.verdict import judge
from tests.e2e.shims import BaseShim
from tests.support.background import BackgroundServers


def test_grpo_through_the_fleet_learns_and_the_replica_serving_the_base_is_withheld(
    shim: tuple[BaseShim, BackgroundServers], tmp_path: Path
) -> None:
    front, servers = shim
    shim_url = ""

    def through(urls: list[str]) -> list[str]:
        nonlocal shim_url
        front.upstream = urls[0]
        with urllib.request.urlopen(urls[0] + "/v1/models", timeout=10) as answer:
            front.base = json.loads(answer.read())["data"][0]["id"]  # the base model's name
        shim_url = servers.start(front.app)
        return [shim_url, urls[1]]

    prepared = prepare(tmp_path / "learn", seed=0)
    settings = settings_for(*prepared)
    outcome = run_leg(FLEET, settings, tmp_path / "learn", LEG_TIMEOUT_S, through=through)
    verdict = judge(outcome.steps)
    print(f"\nlearning through the fleet with a replica serving the base: {verdict.line()}; "
          f"{outcome.wall_s:.0f} s")  # fmt: skip

    # The proxy named the shim's replica, withheld from every version but the first: TRL's v1
    # is the LoRA's initialisation (B = 0), the base model's policy exactly, which the shim does
    # serve (and the probe rightly passes).
    log = "\n".join(outcome.proxy_log)
    shim_id = shim_url.removeprefix("http://")
    withheld = re.findall(r"replica (\S+) withheld from (trl-policy-v\d+)", log)
    assert withheld and {replica for replica, _ in withheld} == {shim_id}, log[-3000:]
    served = re.findall(r"replica (\S+) serves (trl-policy-v\d+) as the trainer computed it", log)
    honest = {replica for replica, v in served if replica != shim_id}
    assert len(honest) == 1
    versions = {v for replica, v in served if replica in honest}
    cut_off = {v for _, v in withheld}
    assert versions - cut_off == {"trl-policy-v1"}, (sorted(versions), sorted(cut_off))
    # No rollout of a version it was withheld from reached the shim's replica; each of those
    # versions was probed there twice (the check, and again after its one reload).
    assert not set(front.rollouts) & cut_off, front.rollouts
    assert all(front.probes[v] == 2 for v in cut_off), front.probes
    assert verdict.learned, verdict.line()
    assert verdict.on_policy, (verdict.line(), [step.get("kl") for step in outcome.steps])
