"""Issue 50's proof for real: a rehearsal of the default plan whose fleet sizes itself
(``--replica-count 1..2``). The jobs, the network group, real TRL, the trainer's scaler, the
Jobs API calls through the real huggingface_hub client and the bridge that answers them are the
rehearsal's real ones; the replicas are simulated (their speed is the scenario).

The scenario, about two minutes here (the budget, ``BUDGET_S``, is what ``make test`` may add):

1. generation-bound: one replica, a rollout of 32 tokens takes 3.2 s (``--gen-token-s 0.1``)
   and TRL keeps 8 in flight, so the trainer waits for samples most of every window: the scaler
   launches ``math-r1-replica-1`` through the bridge, which starts it in the group; the proxy
   discovers it, gives it the adapter window and routes to it;
2. trainer-bound: from adapter version ``LATER`` on a token costs 1 ms (the sim's
   ``--later-version``: every replica changes at the same training step), the CPU trainer waits
   0-7 % of a window, and the scaler drains one replica and cancels its job through the bridge;
   the run goes on to its last step on the other.
``--max-num-seqs 8`` (TRL's in-flight count here): a replica never queues, so once generation
is fast nothing but the trainer's wait speaks (with fewer slots, prefix affinity put all 8 on
one replica and the proxy called the run generation-bound throughout).

The policy, sized for a test (the product's defaults stay in minutes): the scaler decides every
5 s (``window``; the proxy advises over the same 5 s, ``deploy.plan_jobs.advice_window_args``),
a condition must hold 5 s (``sustain``), a change is followed by a cooldown of 10 s (at least the
start-up measured, 5-10 s here), a drain is cut after 20 s. A CPU trainer stepping a tiny model
never waits as little as the product's 2 %: ``retire_wait`` is 0.2 and ``add_wait`` 0.5 (a
window of the first phase reads 57-100 %).

Every assertion reads evidence the scaler does not write: the bridge's job list (who was
launched, with which labels, who was cancelled), ``/proxy/status`` read from this machine every
half second (``fleet_watch``: listed, routed, prompts sent, adapters held, draining), the proxy's
and the rehearsal's log lines, the trainer's exit. The scaler's own lines only name what to look
for (which job it retired). With the scaler off (``SCALER = ("--replica-count", "1")``) it fails
at its first assertion: no scaler in the trainer, no second replica.
"""

from __future__ import annotations

import os
import re
import sys
import time
from pathlib import Path

import pytest

from deploy.plan import PORT
from deploy.rehearsal.bridge_jobs import BridgeJob
from deploy.rehearsal.run import Rehearsal
from deploy.specs import ROLE_LABEL, RUN_LABEL, SCALED_LABEL
from tests.e2e.fleet_watch import Answer, Replica, Watch
from tests.e2e.rehearsals import plan_of

LATER = 10  # from this adapter version on, generation is fast
POLICY = ("window=5s,sustain=5s,cooldown=10s,startup=10s,drain_timeout=20s,"
          "add_wait=0.5,retire_wait=0.2")  # fmt: skip
SCALER = ("--replica-count", "1..2", "--scale-policy", POLICY)
SIM = ("--gen-token-s", "0.1", "--max-num-seqs", "8",
       "--later-version", str(LATER), "--later-gen-token-s", "0.001")  # fmt: skip
# The first phase lasts 35-45 s (the add comes 10 s into it); then 0.2-0.35 s a step leaves the
# retire, which takes 10-20 s from the phase's start to the cancel, 30-50 s.
STEPS = 150
BUDGET_S = 240.0
RETIRING = re.compile(r"scaler: retiring (\S+) \(job (\w+)\): draining replica (\S+) ")
pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the rehearsal needs root")


def _sidecar(rehearsal: Rehearsal) -> str | None:
    """The trainer job's proxy, once the trainer job exists."""
    trainers = [job for job in list(rehearsal.started) if job.spec.role == "trainer"]
    return f"http://{trainers[0].member.address}:{PORT}" if trainers else None


def _rehearse(workdir: Path) -> tuple[Rehearsal, list[Answer], str, float]:
    """The rehearsal, what the proxy said meanwhile, what the rehearsal said, its seconds."""
    plan = plan_of(*SCALER, "--ready-timeout", "2m")
    said: list[str] = []
    rehearsal = Rehearsal(plan, Path(sys.executable), workdir, said.append, steps=STEPS,
                          ready_timeout_s=120.0, train_timeout_s=BUDGET_S,
                          replica_backend="sim", sim_args=SIM)  # fmt: skip
    watch = Watch(lambda: _sidecar(rehearsal))
    began = time.monotonic()
    watch.start()
    try:
        rehearsal.run()  # a job that fails, or a trainer that does not finish, raises here
    finally:
        answers = watch.stop()
        took = time.monotonic() - began
        print(f"scaling rehearsal: {took:.0f} s, {len(answers)} status answers\n" + "\n".join(said))
    return rehearsal, answers, "\n".join(said), took


def _only(jobs: list[BridgeJob], what: str, out: str) -> BridgeJob:
    assert len(jobs) == 1, f"{what}: {[job.name for job in jobs]}\n{out[-3000:]}"
    return jobs[0]


def test_the_fleet_sizes_itself_through_the_bridge_and_the_run_finishes(workdir: Path) -> None:
    rehearsal, answers, out, took = _rehearse(workdir)
    log = (workdir / "logs" / "math-r1-trainer.log").read_text()
    scaler = "\n".join(line for line in log.splitlines() if "scaler: " in line)
    print(f"the trainer's scaler lines:\n{scaler}")
    # 1. The scaler ran in the trainer and launched a replica job through the bridge, labelled
    # as the run's and the scaler's, started in the group under its own alias.
    assert "scaler: on, 1..2 replicas" in log, f"no scaler in the trainer job:\n{out[-3000:]}"
    jobs = rehearsal.book.all()
    launched = _only([job for job in jobs if job.origin == "api"], "jobs launched via the API", out)
    assert launched.name == "math-r1-replica-1", scaler
    assert launched.labels[SCALED_LABEL] == launched.labels[RUN_LABEL] == "math-r1"
    assert launched.local is not None, launched.failure
    assert "replica-1" in launched.local.member.aliases
    assert f"scaler: launched math-r1-replica-1 (job {launched.id}" in log
    # 2. The proxy found it while generation was slow, routed to it, sent it prompts, and it
    # held the newest version the proxy wanted: the run's versions reached it.
    new = Replica(launched.local.member.address, answers)
    assert new.routed, new.describe()
    assert (new.listed[0][0].newest or 0) < LATER, f"launched in the fast phase: {new.describe()}"
    assert new.prompt_tokens > 0, f"never sent a request: {new.describe()}"
    assert new.held_newest and new.held_newest[-1] >= (new.routed[0][0].newest or 0), (
        f"never held the newest version the proxy wanted: {new.describe()}"
    )
    # 3. Trainer-bound, one replica drained and its job cancelled (CANCELED in the bridge's
    # list), the proxy routing nothing more to it and dropping it once it left the group.
    retiring = RETIRING.search(log)
    assert retiring, f"no replica retired:\n{scaler}"
    name, job_id, replica_id = retiring.groups()
    retired = _only([job for job in jobs if job.cancelled], "jobs cancelled", out)
    assert (retired.name, retired.id, retired.stage()[0]) == (name, job_id, "CANCELED")
    assert f"bridge: {name} cancelled through the Jobs API: stopped, out of the group's DNS" in out
    assert retired.local is not None
    gone = Replica(retired.local.member.address, answers)
    assert gone.drained and (gone.drained[0][0].newest or 0) >= LATER, gone.describe()
    assert gone.routed_after_drain() == [], gone.describe()
    assert f"admin: replica {replica_id} draining" in log
    assert re.search(rf"replica {re.escape(replica_id)} left \(no longer among .*\): removed", log)
    assert gone.last is None, f"still listed at the end: {gone.describe()}"
    # 4. The run went on: every step trained through the proxy, TRL raised nothing, and the
    # replica that stayed was routed to the end.
    assert f"trained {STEPS} step(s) through the proxy and exited 0" in out
    assert "Traceback" not in log and not re.search(r" (ERROR|CRITICAL) trl\b", log)
    replicas = [job for job in jobs if job.labels.get(ROLE_LABEL) == "replica"]
    kept = _only([job for job in replicas if not job.cancelled], "replica jobs kept", out)
    assert kept.local is not None
    stayed = Replica(kept.local.member.address, answers)
    assert stayed.last is not None and stayed.last["routable"], stayed.describe()
    assert "bridge: answered" in out and "started 1 job(s) for them, refused 0 other" in out
    assert took < BUDGET_S
