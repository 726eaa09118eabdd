"""Every job of a ``RunPlan`` as the ``JobSpec`` ``deploy up`` launches: the replicas, the proxy
job, the trainer nodes, each a pure function of the plan (``deploy.plan`` says what the jobs are
and how they meet: the bucket layout, the network group, the secrets, a shared fleet's parts).
A fleet that sizes itself: trainer node 0 carries the scaler's configuration
(``scaler_config``) in its environment, and the proxy the scaler reads (the sidecar, or the proxy
job) judges its advice over the scaler's window (``advice_window_args``).
"""

from __future__ import annotations

from collections.abc import Sequence

from deploy.install import Expanded
from deploy.plan import (
    FLEET_KEY_SECRET,
    PORT,
    REPLICA_KEY_SECRET,
    TOKEN_SECRET,
    RunPlan,
    alias_address,
    gpu_count,
)
from deploy.prices import DOLLARS_PER_HOUR
from deploy.scaler.config import SCALER_ENV, ScalerConfig
from deploy.specs import REPLICAS_LABEL, GroupMember, JobSpec, Role


def exposed_url_placeholder(job_name: str) -> str:
    """Stands for a job's exposed URL before the job exists (``--dry-run``)."""
    return f"https://<{job_name} job id>--{PORT}.hf.jobs"


def replica_argv(plan: RunPlan) -> list[str]:
    return [
        *("python3", "-m", "replica_entry", "--backend", "vllm"),
        *("--host", "0.0.0.0", "--port", str(PORT), "--model", plan.model),
        "--adapter-receiver" if plan.adapter_push else "--no-adapter-receiver",
        # Public: behind HF Jobs' exposed port, which checks the HF token on every request (one
        # Authorization header cannot carry a second key): the receiver's explicit opt-in.
        # Private: the run's key ($VLLM_API_KEY) guards vLLM and the receiver alike.
        *(("--receiver-without-key",) if plan.adapter_push and not plan.private else ()),
        *plan.replica_args,
    ]


def network_of(plan: RunPlan, role: Role, claims: bool = True) -> GroupMember | None:
    """The job's place in the run's network group, claiming its role as alias unless not
    ``claims`` (none on the public network)."""
    group = plan.network_group
    return None if group is None else GroupMember(group, (plan.alias(role),) if claims else ())


def replica_spec(plan: RunPlan, index: int) -> JobSpec:
    """Replica job ``index`` (``JobSpec.numbered``: the scaler numbers its own the same way)."""
    return JobSpec(
        name=plan.job_name("replica", 0),
        role="replica",
        image=plan.images.replica,
        command=plan.install.wrap_into_image(replica_argv(plan), "replica"),
        flavor=plan.flavors.replica,
        timeout=plan.timeout("replica"),
        volumes=(plan.mount(),),
        labels=plan.labels("replica", 0),
        env=plan.replica_env,
        secret_names=plan.secrets("replica"),
        expose=(PORT,),
        attempts=plan.attempts,
        network=network_of(plan, "replica"),
    ).numbered(plan.run_name, index, scaling=plan.scale is not None)


def scaler_config(plan: RunPlan) -> ScalerConfig:
    """What the scaler in trainer node 0 is told (``deploy.scaler.config``); a flavor without a
    price counts 0 (``deploy.up_flags`` refuses a budget then)."""
    assert plan.scale is not None
    price = DOLLARS_PER_HOUR.get
    fixed = plan.trainer_nodes * price(plan.flavors.trainer, 0.0)
    if plan.topology == "job":
        fixed += price(plan.flavors.proxy, 0.0)
    return ScalerConfig(
        scaling=plan.scale,
        run_name=plan.run_name,
        namespace=plan.namespace,
        replica=replica_spec(plan, 0),
        replica_per_h=price(plan.flavors.replica, 0.0),
        fixed_per_h=fixed,
        ready_timeout_s=plan.ready_timeout_s,
        state_dir=plan.scaler_state_dir,
        port=PORT,
    )


def advice_window_args(plan: RunPlan) -> list[str]:
    """``--advice-window`` for the proxy a scaler reads: the scaler's own window, so the verdict
    it decides on (``generation-bound`` blocks a retire) describes the stretch its other figures
    do. With the proxy's 60 s beside a 10 s scaler window, a generation-bound verdict outlived
    the run turning trainer-bound by half a minute in the rehearsal, holding its retire back.
    None for a fixed fleet (the proxy's default)."""
    if plan.scale is None:
        return []
    return [f"--advice-window={plan.scale.policy.window_s:g}s"]


def proxy_spec(plan: RunPlan, replica_urls: Sequence[str] = ()) -> JobSpec:
    """The proxy job: finding the replicas at their alias (private), else starting from
    ``replica_urls`` and finding replacements through the Jobs API (a new job, a new URL)."""
    if plan.private:
        where: list[str] = ["--discover", plan.replica_discovery]
    else:
        where = [
            *("--replica-urls", ",".join(replica_urls)),
            *("--discover", f"hf-jobs:{REPLICAS_LABEL}={plan.run_name}"),
            *("--discover-namespace", plan.namespace),
        ]
    argv = [
        *("python3", "-m", "proxy", "--host", "0.0.0.0", "--port", str(PORT)),
        *where,
        # A fleet's proxy takes each run's adapters from that run's relay (push or its load's
        # path in the bucket), no one directory of its own to watch.
        *(() if plan.shared else ("--adapters-dir", plan.adapters_dir)),
        # Its adapter window where a retry of this job (a fresh container) finds it again.
        *("--state-dir", plan.proxy_state_dir),
        *advice_window_args(plan),
        "--supervise",  # a proxy that dies comes back on the same port within seconds
        plan.push_flag,
    ]
    return JobSpec(
        name=plan.job_name("proxy"),
        role="proxy",
        image=plan.images.proxy,
        command=plan.install.wrap(argv),
        flavor=plan.flavors.proxy,
        timeout=plan.timeout("proxy"),
        volumes=(plan.mount(writable=True),),  # its state file (nothing else is written)
        labels=plan.labels("proxy"),
        env={"PYTHONUNBUFFERED": "1"},
        secret_names=plan.secrets("proxy"),
        expose=(PORT,),
        attempts=plan.attempts,
        network=network_of(plan, "proxy"),
    )


def trainer_argv(
    plan: RunPlan,
    *,
    replica_urls: Sequence[str] = (),
    proxy_url: str | None = None,
    node: int = 0,
) -> list[str]:
    """Trainer node ``node``'s command: beside its own proxy (``replica_urls``) or pointed at
    ``proxy_url``; with neither, the planned one with exposed URLs as placeholders. On the
    private network neither is needed: the aliases are known before any job exists. With
    several nodes, every one meets node 0 at the ``trainer`` alias (torch's rendezvous)."""
    if plan.private:
        target = _private_target(plan)
    else:
        target = _public_target(plan, replica_urls, proxy_url)
    target.append(f"--proxy-arg={plan.push_flag}")  # the sidecar, or the relay
    if plan.topology == "sidecar":  # a proxy job judges for itself (``proxy_spec``)
        target.extend(f"--proxy-arg={arg}" for arg in advice_window_args(plan))
    world: list[str] = []
    if plan.trainer_nodes > 1:
        world = [
            *("--nnodes", str(plan.trainer_nodes), "--node-rank", str(node)),
            *("--master-addr", alias_address(plan.alias("trainer"))),
        ]
    return [
        *("python3", "-m", "trainer_entry", "--model", plan.model),
        # One FSDP2 rank per GPU of the flavor (what trainer_entry detects; written out to show).
        *("--num-processes", str(gpu_count(plan.flavors.trainer))),
        *world,
        *target,
        *("--output-dir", plan.run_dir),
        *plan.trainer_args,
    ]


def _private_target(plan: RunPlan) -> list[str]:
    if plan.fleet:  # its fleet's proxy job, under the run's own path, declared by the trainer
        return [
            *(
                "--proxy-url",
                Expanded(f"http://{alias_address('proxy')}:{PORT}/runs/{plan.run_name}"),
            ),
            *("--fleet-key-env", FLEET_KEY_SECRET, "--run-weight", f"{plan.run_weight:g}"),
        ]
    if plan.topology == "job":
        return ["--proxy-url", Expanded(f"http://{alias_address('proxy')}:{PORT}")]
    return [
        *("--discover", plan.replica_discovery, "--replica-token-env", REPLICA_KEY_SECRET),
        *("--sidecar-host", "0.0.0.0", "--sidecar-port", str(PORT)),
    ]


def _public_target(plan: RunPlan, replica_urls: Sequence[str], proxy_url: str | None) -> list[str]:
    if not replica_urls and proxy_url is None:
        replicas = [
            exposed_url_placeholder(plan.job_name("replica", i)) for i in range(plan.replicas)
        ]
        if plan.topology == "sidecar":
            replica_urls = replicas
        else:
            proxy_url = exposed_url_placeholder(plan.job_name("proxy"))
    if proxy_url is not None:
        target = ["--proxy-url", proxy_url, "--proxy-token-env", TOKEN_SECRET]
    else:
        target = [
            *("--replica-urls", ",".join(replica_urls), "--replica-token-env", TOKEN_SECRET),
            *("--sidecar-host", "0.0.0.0", "--sidecar-port", str(PORT)),
        ]
    return target


def trainer_spec(
    plan: RunPlan,
    *,
    replica_urls: Sequence[str] = (),
    proxy_url: str | None = None,
    node: int = 0,
) -> JobSpec:
    """Trainer node ``node``: beside its own proxy (``replica_urls``) or pointed at
    ``proxy_url``; node 0 alone runs that proxy side and claims the ``trainer`` alias.

    The sidecar proxy listens on the exposed port, so ``deploy up`` and ``deploy status`` can
    see whether it routes to the replicas; TRL talks to it on 127.0.0.1.
    """
    argv = trainer_argv(plan, replica_urls=replica_urls, proxy_url=proxy_url, node=node)
    return JobSpec(
        name=plan.job_name("trainer", node or None),
        role="trainer",
        image=plan.images.trainer,
        command=plan.install.wrap_into_image(argv, "trainer"),
        flavor=plan.flavors.trainer,
        timeout=plan.timeout("trainer"),
        volumes=(plan.mount(writable=True),),
        labels=plan.labels("trainer", node or None),
        env=_trainer_env(plan, node),
        secret_names=plan.trainer_secrets,
        expose=(PORT,) if plan.topology == "sidecar" and node == 0 else (),
        attempts=plan.attempts,
        network=network_of(plan, "trainer", claims=node == 0),
    )


def _trainer_env(plan: RunPlan, node: int) -> dict[str, str]:
    """Node 0 runs the scaler when the fleet sizes itself (its configuration, no secret)."""
    env = {"PYTHONUNBUFFERED": "1"}
    if plan.scale is not None and node == 0:
        env[SCALER_ENV] = scaler_config(plan).to_json()
    return env


def trainer_specs(
    plan: RunPlan, *, replica_urls: Sequence[str] = (), proxy_url: str | None = None
) -> list[JobSpec]:
    """Every trainer node of the run, node 0 first."""
    return [
        trainer_spec(plan, replica_urls=replica_urls, proxy_url=proxy_url, node=node)
        for node in range(plan.trainer_nodes)
    ]


def dry_run_specs(plan: RunPlan) -> list[JobSpec]:
    """Every job of the run in launch order, exposed URLs shown as placeholders."""
    if plan.fleet:  # a run on a fleet: its trainer only
        return trainer_specs(plan)
    replicas = [replica_spec(plan, index) for index in range(plan.replicas)]
    if plan.topology == "sidecar":
        return [*replicas, *trainer_specs(plan)]
    proxy = proxy_spec(plan, [exposed_url_placeholder(spec.name) for spec in replicas])
    return [*replicas, proxy, *(() if plan.shared else trainer_specs(plan))]
