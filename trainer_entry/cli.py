"""``rollout-trainer`` / ``python -m trainer_entry``: TRL's AsyncGRPOTrainer with a LoRA, pointed
at the proxy, on every GPU of the machine.

The command is the run's launcher, in this order:
1. flags -> ``TrainerOptions`` (``trainer_entry.flags``; nothing heavy imported; exit 2 names a bad
   flag); the inputs checked (``trainer_entry.inputs``: local paths, then the Hub ids on the
   Hub; exit 2 in one line, before anything starts); torch, TRL and PEFT installed (else exit 2
   naming the extra); the ranks of this machine (``--num-processes``, default: its GPUs) and
   the recipe's sizes for it (``Recipe.for_machine``: the CPU recipe without CUDA, said in one
   line); a dataset whose prompts ask for an answer shape the rewards cannot read, said in one
   line;
2. node 0 only: the checkpoint to resume from (``--resume auto``: the newest complete one in
   ``--output-dir``), where TRL saves adapters (``trainer_entry.lora_dir``: ``--adapters-local``,
   by default a fresh directory on this machine's disk, removed after the run) and what a dead
   run left past the resume point removed from there and from the bucket
   (``trainer_entry.checkpoints``); then the proxy side, started once for the whole run, which
   pushes each version from the local directory and copies it into ``<output_dir>/.vllm_lora``
   (the bucket the replicas mount) behind the sync:

   - ``--replica-urls URL[,URL...]``: the proxy beside the trainer in front of the
     replicas, watching the directory TRL saves into; it
     sends ``Authorization: Bearer $HF_TOKEN`` to the replicas (``--replica-token-env`` names
     another variable), as HF Jobs' exposed ports demand; ``--sidecar-host 0.0.0.0
     --sidecar-port 8000`` makes it reachable from outside the job, TRL still talks to it on
     127.0.0.1;
   - ``--proxy-url URL [--proxy-token-env VAR]``: a proxy elsewhere, always through a local
     relay (the proxy with one upstream) that pushes each adapter version TRL saves into the
     remote proxy's receiver before it forwards TRL's load, and adds ``Authorization: Bearer
     $VAR`` for TRL, which cannot send one;
3. the recipe resolved (``max_inflight_tasks`` from the replicas the proxy reports) and printed,
   every value with its flag;
4. the ranks (``trainer_entry.launch``): one process, or FSDP2 ranks under ``accelerate launch``;
   with ``--nnodes K`` each machine runs this same command with its ``--node-rank``.

Exit codes: 0 when training finished, 2 for a bad flag or input (the message names it) or a local
proxy that would not start (its own line says why), 3 when a rank ran out of GPU memory (the
message names the knob), 1 for anything else.
"""

from __future__ import annotations

import logging
import os
import shutil
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import replace
from pathlib import Path

from trainer_entry import checkpoints, fleet_run, lora_dir, sidecar
from trainer_entry.flags import build_parser
from trainer_entry.freeze import options_from_args
from trainer_entry.inputs import BadInput, check_hub, check_local, first_prompt
from trainer_entry.launch import (
    MissingExtra,
    check_trainer_packages,
    machine_gpus,
    run_ranks,
    with_processes,
)
from trainer_entry.options import TrainerOptions
from trainer_entry.prompts import asked_shape, shape_mismatch
from trainer_entry.proxy_figures import replicas_reported

log = logging.getLogger("trainer_entry")
# A sidecar that finds its replicas by name: how long the recipe waits for it to list one
# (its in-flight default is sized by their number).
DISCOVERY_WAIT_S = 15.0


@contextmanager
def proxy_for(options: TrainerOptions) -> Iterator[str]:
    """The base URL TRL should use, with whatever local proxy that needs running meanwhile."""
    topology = options.topology
    bucket = options.output_dir / checkpoints.LORA_DIR
    bucket.mkdir(parents=True, exist_ok=True)
    mirror = sidecar.mirror_args(options.adapters_local, bucket)
    if topology.sidecar:
        port = topology.sidecar_port or sidecar.free_port()
        argv = sidecar.sidecar_command(
            topology.sidecar_replicas, port, options.adapters_local or bucket,
            (*mirror, *topology.proxy_args), topology.sidecar_host,
            discover=topology.sidecar_discover,
        )  # fmt: skip
        local = sidecar.on_this_machine(topology.sidecar_replicas)
        env = sidecar.upstream_token_env(os.environ, topology.replica_token_env, local)
        where = topology.sidecar_discover or ", ".join(topology.sidecar_replicas)
        log.info("starting the sidecar proxy for %s", where)
        with sidecar.running(argv, env=env) as url:
            yield sidecar.local_url(url)
        return
    assert topology.proxy_url is not None
    extra = (*mirror, *topology.proxy_args)
    argv = sidecar.relay_command(topology.proxy_url, sidecar.free_port(), extra)
    env = {}
    if topology.proxy_token_env is not None:
        env["PROXY_UPSTREAM_TOKEN"] = os.environ[topology.proxy_token_env]
    how = f"bearer token from ${topology.proxy_token_env}" if env else "no token"
    with ExitStack() as stack:
        if topology.fleet_key_env is not None:  # a run on a shared fleet: declared while it runs
            key = os.environ[topology.fleet_key_env]
            stack.enter_context(fleet_run.declared(topology.proxy_url, key, topology.run_weight))
        log.info("starting a local relay to %s (pushes adapters; %s)", topology.proxy_url, how)
        yield stack.enter_context(sidecar.running(argv, env=env))


def figures_source(options: TrainerOptions) -> tuple[str | None, str | None]:
    """Where the proxy's figures come from: the remote proxy (and its token) behind the local
    relay, whose own view is one upstream; (None, None): the proxy TRL talks to."""
    topology = options.topology
    if topology.proxy_url is None:
        return None, None
    env = topology.proxy_token_env
    return topology.proxy_url, os.environ.get(env) if env is not None else None


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    options = options_from_args(parser.parse_args(argv), parser)
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    for client in ("httpx", "httpx2"):  # huggingface_hub's: a line per request at INFO
        logging.getLogger(client).setLevel(logging.WARNING)
    try:  # before anything starts: no sidecar, no output directory, no heavy import
        check_local(options)
        shape = asked_shape(first_prompt(options.dataset, options.prompt_column))
        os.environ.update(check_hub(options, os.environ))  # the ranks inherit it
        check_trainer_packages()
        gpus = machine_gpus()
    except (BadInput, MissingExtra) as exc:
        print(f"rollout-trainer: {exc}", file=sys.stderr)
        return 2
    recipe, why = options.recipe.for_machine(gpus)
    log.info("recipe: %s", why)
    mismatch = shape_mismatch(options.rewards, shape)
    if mismatch is not None:
        log.warning("%s", mismatch)
    options = replace(options, world=with_processes(options.world, gpus), recipe=recipe)
    options.output_dir.mkdir(parents=True, exist_ok=True)
    if not options.world.main_node:  # the proxy side and the resume choice are node 0's
        options = replace(options, recipe=options.recipe.resolved(options.world.world_size))
        return run_ranks(options, gpus, "", (None, None))
    try:
        resume = checkpoints.choose(options.checkpoints, options.output_dir)
    except checkpoints.ResumeError as exc:
        print(f"rollout-trainer: {exc}", file=sys.stderr)
        return 2
    log.info("resume point: %s", resume or "none, a fresh start")
    local, fresh = lora_dir.choose(options.adapters_local, options.adapters_in_bucket)
    options = replace(options, adapters_local=local)
    log.info("TRL saves adapters into %s", local or "the bucket (--adapters-in-bucket)")
    checkpoints.clear_stale(options.output_dir, resume, local)
    try:
        return _run(options, gpus, resume)
    except (fleet_run.FleetRefused, sidecar.ProxyNotReady) as exc:
        print(f"rollout-trainer: {exc}", file=sys.stderr)
        return 2
    finally:
        if fresh and local is not None:  # the proxy has stopped: its mirror has drained
            shutil.rmtree(local, ignore_errors=True)


def _run(options: TrainerOptions, gpus: int, resume: Path | None) -> int:
    """Node 0: the proxy side, the recipe resolved against it, and the ranks."""
    with proxy_for(options) as url:
        figures = figures_source(options)
        replicas = replicas_reported(figures[0] or url, figures[1])
        deadline = time.monotonic() + DISCOVERY_WAIT_S
        while (
            replicas is None and options.topology.sidecar_discover and time.monotonic() < deadline
        ):
            time.sleep(0.2)  # its first lookup may land just after it said ready
            replicas = replicas_reported(url)
        recipe = options.recipe.resolved(options.world.world_size)
        options = replace(options, recipe=recipe, resume_from=resume)
        log.info("TRL talks to %s; %s replica(s) behind it", url, replicas or "unknown")
        log.info("recipe (every value a flag):")
        for line in recipe.describe():
            log.info("  %s", line)
        return run_ranks(options, gpus, url, figures)


if __name__ == "__main__":
    sys.exit(main())
