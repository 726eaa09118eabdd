"""Plain TRL's path (no trainer's reference in the versions: the proxy judges replicas by
comparing them) through the fleet with a lying replica in it: real TRL, two real vLLM CPU
servers, the proxy beside the trainer, one server behind a shim that acknowledges every adapter
and answers every request for one with the base model (``tests.e2e.shims``).

Once the proxy has withheld the shim's replica (suspect ``--probe-repeat`` times), that replica
answers no rollout of any later version, though its probe of a new version may come before the
honest replica's (issue 48: trust once lost is earned per version; before, a distrusted
replica's stale answer with nothing yet to compare it with was judged ok, and it served the
version until the honest replica's probe came in). The shim's own counts say which rollouts
reached it; TRL's figures cannot."""

from __future__ import annotations

import json
import re
import urllib.request
from pathlib import Path

from benchmarks.learn.cli import LEG_TIMEOUT_S, prepare, settings_for
from benchmarks.learn.legs import FLEET, run_leg
from tests.e2e.shims import BaseShim
from tests.support.background import BackgroundServers

STEPS = 10  # a version per step (weight_sync_steps 1): the shim is distrusted from v3 on
REPEAT = 2  # --probe-repeat: suspect twice, then withheld


def _number(version: str) -> int:
    return int(version.rsplit("-v", 1)[1])


def test_a_replica_withheld_by_comparison_serves_no_rollout_of_a_later_version(
    shim: tuple[BaseShim, BackgroundServers], tmp_path: Path
) -> None:
    front, servers = shim
    shim_url = ""

    def through(urls: list[str]) -> list[str]:
        nonlocal shim_url
        front.upstream = urls[0]
        with urllib.request.urlopen(urls[0] + "/v1/models", timeout=10) as answer:
            front.base = json.loads(answer.read())["data"][0]["id"]
        shim_url = servers.start(front.app)
        return [shim_url, urls[1]]

    prepared = prepare(tmp_path / "learn", seed=0)
    proxy_args = (f"--proxy-arg=--probe-repeat={REPEAT}",)
    settings = settings_for(
        *prepared, steps=STEPS, trainer_args=("--no-probe-reference", *proxy_args)
    )
    outcome = run_leg(FLEET, settings, tmp_path / "learn", LEG_TIMEOUT_S, through=through)
    log = "\n".join(outcome.proxy_log)
    shim_id = shim_url.removeprefix("http://")
    withheld = re.findall(r"replica (\S+) withheld from (trl-policy-v\d+)", log)
    print(f"\nplain TRL, a lying replica: withheld {sorted(v for _, v in withheld)}; rollouts at "
          f"the shim {dict(front.rollouts)}; {outcome.wall_s:.0f} s")  # fmt: skip
    assert withheld and {replica for replica, _ in withheld} == {shim_id}, log[-3000:]
    assert "as the trainer computed it" not in log  # no reference: judged by comparison
    # Distrusted from the version it was suspect for the REPEAT-th time (the earlier suspect
    # versions are withheld then too, after their rollouts were served: one suspicion must
    # never withhold an honest replica).
    suspect = re.findall(rf"replica {re.escape(shim_id)} answers (trl-policy-v\d+) as it "
                         rf"answers its base model .* suspect {REPEAT} time", log)  # fmt: skip
    assert suspect, log[-3000:]
    distrusted = _number(suspect[0])
    later = {v: n for v, n in front.rollouts.items() if _number(v) >= distrusted}
    assert not later, (distrusted, dict(front.rollouts))
    assert len(outcome.steps) == STEPS
