"""The run's network: the private group (aliases, the run's key, DNS discovery), the public
edge path, and several trainer nodes meeting at node 0's alias; in ``--dry-run`` and through
the Jobs stand-in."""

from __future__ import annotations

import io

import pytest

from deploy.cli import Runtime, main
from tests.deploy.conftest import TOKEN, Stand
from tests.deploy.test_dry_run import ARGS, _no_token, dry_run
from tests.deploy.test_up import UP
from tests.support.clock import SteppingClock as FakeClock
from tests.support.hub_jobs import Step


def test_public_network_dry_run(monkeypatch: pytest.MonkeyPatch) -> None:
    specs = dry_run("--network", "public", "--run-name", "pub", monkeypatch=monkeypatch)

    assert [spec["network_group"] for spec in specs] == [None, None, None]
    assert [spec["network_aliases"] for spec in specs] == [[], [], []]
    replica, _, trainer = specs
    assert replica["secrets"] == {"HF_TOKEN": "***"}
    # Behind HF's edge, which checks the HF token: the receiver's explicit opt-in.
    assert "--adapter-receiver --receiver-without-key " in replica["command"][2]
    assert trainer["secrets"] == {"HF_TOKEN": "***"}
    assert (
        "--replica-urls 'https://<pub-replica-0 job id>--8000.hf.jobs,"
        "https://<pub-replica-1 job id>--8000.hf.jobs' --replica-token-env HF_TOKEN "
        "--sidecar-host 0.0.0.0 --sidecar-port 8000 --proxy-arg=--adapter-push "
        "--output-dir /lora/pub"
    ) in trainer["command"][2]


def test_job_topology_on_the_private_network(monkeypatch: pytest.MonkeyPatch) -> None:
    specs = dry_run("--topology", "job", "--run-name", "exp2", monkeypatch=monkeypatch)

    assert [spec["network_aliases"] for spec in specs] == [
        ["replica"], ["replica"], ["proxy"], ["trainer"]
    ]  # fmt: skip
    proxy, trainer = specs[2], specs[3]
    # The proxy job holds the run's key alone (sent upstream), not the user's HF token.
    assert proxy["secrets"] == {"PROXY_UPSTREAM_TOKEN": "***"}
    assert proxy["expose"] == [8000]  # kept for watching the run through the edge
    assert proxy["command"][2].endswith(
        '--discover "dns:${HF_NETWORK_GROUP_PREFIX}replica:8000" '
        "--adapters-dir /lora/exp2/.vllm_lora --state-dir /lora/exp2/.proxy-state --supervise "
        "--adapter-push"
    )
    assert trainer["secrets"] == {"HF_TOKEN": "***"}
    assert trainer["expose"] == []
    assert (
        '--proxy-url "http://${HF_NETWORK_GROUP_PREFIX}proxy:8000" --proxy-arg=--adapter-push'
        in trainer["command"][2]
    )


def test_several_trainer_nodes_meet_at_node_0s_alias(monkeypatch: pytest.MonkeyPatch) -> None:
    specs = dry_run("--run-name", "mn", "--trainer-nodes", "3", monkeypatch=monkeypatch)

    trainers = [spec for spec in specs if spec["role"] == "trainer"]
    assert [spec["name"] for spec in trainers] == ["mn-trainer", "mn-trainer-1", "mn-trainer-2"]
    assert [spec["network_aliases"] for spec in trainers] == [["trainer"], [], []]
    assert [spec["expose"] for spec in trainers] == [[8000], [], []]  # node 0 runs the proxy side
    for node, spec in enumerate(trainers):
        assert (
            f"--num-processes 2 --nnodes 3 --node-rank {node} "
            '--master-addr "${HF_NETWORK_GROUP_PREFIX}trainer" '
        ) in spec["command"][2]
        assert spec["labels"].get("rollout-index", "0") == str(node)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (("--trainer-nodes", "2", "--network", "public"), "--trainer-nodes: several trainer"),
        (("--trainer-nodes", "0"), "--trainer-nodes: must be at least 1 (got 0)"),
    ],
)
def test_trainer_nodes_need_the_private_network(
    argv: tuple[str, ...], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main([*ARGS, "--dry-run", *argv], Runtime(clock=FakeClock(), token=_no_token))
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize(
    ("nodes", "flags"),
    [("1", ("--nnodes", "2")), ("2", ("--master-addr", "10.0.0.9")), ("1", ("--node-rank", "0",
     "--master-addr", "elsewhere"))],
)  # fmt: skip
def test_the_trainers_world_flags_are_deploys_to_write(nodes: str, flags: tuple[str, ...]) -> None:
    out, err = io.StringIO(), io.StringIO()
    runtime = Runtime(clock=FakeClock(), token=_no_token, out=out, err=err)
    argv = [*ARGS, "--dry-run", "--trainer-nodes", nodes, "--", "--dataset", "d", *flags]
    assert main(argv, runtime) == 2
    assert "--nnodes, --node-rank and --master-addr are deploy's to write" in err.getvalue()
    assert out.getvalue() == ""


def test_private_up_puts_every_job_in_the_runs_group_with_a_key_of_its_own(
    stand: Stand,
) -> None:
    urls = [stand.replica(f"r1-replica-{index}") for index in range(2)]
    proxy_url = stand.proxy("r1-proxy", urls)

    result = stand.cli(*UP, "--replica-count", "2", "--topology", "job")

    assert result.code == 0, result.err
    specs = {job.name: job.spec for job in stand.hub.jobs.values()}
    assert {name: spec["network"] for name, spec in specs.items()} == {
        "r1-replica-0": {"group": "r1", "aliases": ["replica"]},
        "r1-replica-1": {"group": "r1", "aliases": ["replica"]},
        "r1-proxy": {"group": "r1", "aliases": ["proxy"]},
        "r1-trainer": {"group": "r1", "aliases": ["trainer"]},
    }
    key = specs["r1-replica-0"]["secrets"]["VLLM_API_KEY"]
    assert len(key) == 43 and key != TOKEN  # 256 random bits, URL-safe; not the HF token
    assert specs["r1-replica-1"]["secrets"] == {"HF_TOKEN": TOKEN, "VLLM_API_KEY": key}
    assert specs["r1-proxy"]["secrets"] == {"PROXY_UPSTREAM_TOKEN": key}  # sent upstream
    assert key not in result.out + result.err
    assert all(key not in " ".join(spec["command"]) for spec in specs.values())
    assert "launched r1-proxy: job 000000000000000066500003 (cpu-upgrade, python:3.11-slim, " \
        "network group r1)" in result.out  # fmt: skip
    # The exposed port stays for watching the run: up waited on it, status reads it.
    assert f"{proxy_url} its proxy routes to 2/2 replicas" in result.out
    status = stand.cli("status", "--run-name", "r1", "--namespace", "alice")
    assert status.code == 0, status.err
    assert "[network r1 as replica]" in status.out
    assert "[network r1 as proxy]" in status.out
    # A second run gets a key of its own.
    second = stand.cli(*UP, "--replica-count", "1", "--run-name", "r2", "--ready-timeout", "10")
    assert second.code == 1  # its replica has no exposed app here; only its spec matters
    assert stand.hub.named("r2-replica-0").spec["secrets"]["VLLM_API_KEY"] != key


def test_up_waits_for_every_trainer_node(stand: Stand) -> None:
    stand.fleet(1)
    stand.hub.script("r1-trainer-1", Step("SCHEDULING", seconds=40), "RUNNING")

    result = stand.cli(*UP, "--replica-count", "1", "--trainer-nodes", "2")

    assert result.code == 0, result.err
    node = stand.hub.named("r1-trainer-1")
    assert node.network == {"group": "r1"}
    assert "r1-trainer-1 (000000000000000066500003): SCHEDULING" in result.out
    assert "r1-trainer-1 (000000000000000066500003): RUNNING" in result.out
    assert "r1-trainer-1" in result.out.split("is up", 1)[1]
