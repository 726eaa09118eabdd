"""The served policy, attested: a replica that acknowledges a load but answers with the base
model's (or the previous version's) policy under the new name is found by the probe and
withheld from that version, and traffic for it then goes only to the honest replicas.

With the trainer's reference in the version (``rollout_probe.json``), within one version of the
adapter moving; without one (plain TRL), within ``--probe-repeat`` versions, by comparison with
the honest replica and the earlier versions. An honest fleet is never withheld from anything,
and every answer names the policy that gave it."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from proxy.app import PROXY
from proxy.dataplane.headers import DIGEST_SHOWN, POLICY_HEADER, REPLICA_HEADER
from tests.support.adapters import PROBE_IDS, write_adapter, write_version
from tests.support.calls import completion, load_body, metrics_text, post
from tests.support.fleet import Stack, run_stack, wait_for

HONEST: dict[str, Any] = {}
SERVES_BASE: dict[str, Any] = {"faults": {"policy": "base"}}
SERVES_PREVIOUS: dict[str, Any] = {"faults": {"policy": "previous"}}


async def load(stack: Stack, path: Path) -> None:
    status, body, _ = await post(stack, "/v1/load_lora_adapter", load_body(path.name, path))
    assert status == 200, body


async def routed(stack: Stack, replica: str, name: str) -> None:
    record = stack.pool.get(replica)
    assert record is not None
    await wait_for(lambda: name in record.adapters, what=f"{name} routed to {replica}")


async def settled(stack: Stack) -> None:
    """Until every replica's agent has done what it can (its probes answered)."""
    await stack.proxy_app[PROXY].adapters.service.settled()


async def status_of(stack: Stack) -> dict[str, Any]:
    async with stack.session.get(stack.proxy_url + "/proxy/status") as response:
        answer: dict[str, Any] = await response.json()
    return answer


async def served_by(stack: Stack, model: str, requests: int = 16, first: int = 0) -> set[str]:
    """The replicas that answered ``requests`` completions for ``model``, keys ``first`` on
    (keys spread them; a key once placed sticks to its replica)."""
    replicas = set()
    for key in range(first, first + requests):
        status, body, headers = await post(
            stack, "/v1/completions", completion(model, prompt=[key, 9, 8, 7]),
            headers={"X-Routing-Key": f"k{key}"},
        )  # fmt: skip
        assert status == 200, body
        replicas.add(headers[REPLICA_HEADER])
        assert headers[POLICY_HEADER].startswith(f"{model}@")
    return replicas


def metric(text: str, name: str, **labels: str) -> float:
    wanted = ",".join(f'{k}="{v}"' for k, v in labels.items())
    series = f"{name}{{{wanted}}} " if labels else f"{name} "
    line = next(x for x in text.splitlines() if x.startswith(series))
    return float(line.rsplit(" ", 1)[1])


@pytest.mark.parametrize("fault", [SERVES_BASE, SERVES_PREVIOUS], ids=["base", "previous"])
async def test_with_the_trainers_reference_a_faulty_replica_is_withheld_at_once(
    tmp_path: Path, fault: dict[str, Any]
) -> None:
    async with run_stack(sims=[HONEST, fault]) as stack:
        honest, faulty = (sim.id for sim in stack.sims)
        for n in (1, 2):
            await load(stack, write_version(tmp_path, n, reference=True))
            name = f"trl-policy-v{n}"
            await routed(stack, honest, name)
            assert await served_by(stack, name) == {honest}  # never the faulty one, even unprobed
            await settled(stack)
            policy = (await status_of(stack))["adapters"]["policy"]
            assert policy["replicas"][faulty][name]["state"] == "withheld"
            assert policy["replicas"][honest][name]["state"] == "ok"
            assert not policy["alarm"]  # the honest replica serves it: training goes on
        text = await metrics_text(stack)
        assert metric(text, "rollout_proxy_policy_mismatch_total", replica=faulty) == 2
        assert metric(text, "rollout_proxy_policy_mismatch_total", replica=honest) == 0
        # The faulty replica was loaded twice per version (the one retry), then withheld.
        records = stack.sims[1].state.records
        loads = [r.model for r in records if r.path == "/v1/load_lora_adapter"]
        assert loads == ["trl-policy-v1", "trl-policy-v1", "trl-policy-v2", "trl-policy-v2"]


async def test_when_no_replica_serves_the_trainers_policy_all_serve_and_the_alarm_rings(
    tmp_path: Path,
) -> None:
    async with run_stack(sims=[SERVES_BASE, SERVES_BASE]) as stack:
        await load(stack, write_version(tmp_path, 1, reference=True))
        await wait_for(
            lambda: all("trl-policy-v1" in r.adapters for r in stack.pool), what="served anyway"
        )
        assert len(await served_by(stack, "trl-policy-v1")) == 2  # training is not stalled
        assert (await status_of(stack))["adapters"]["policy"]["alarm"]
        assert metric(await metrics_text(stack), "rollout_proxy_policy_alarm") == 1


async def test_without_a_reference_a_replica_serving_the_base_is_withheld_within_three_versions(
    tmp_path: Path,
) -> None:
    async with run_stack(sims=[HONEST, SERVES_BASE]) as stack:
        honest, faulty = (sim.id for sim in stack.sims)
        # Plain TRL: its first rollout's prompt gives the probe its token ids.
        assert (await post(stack, "/v1/completions", completion(prompt=PROBE_IDS)))[0] == 200
        states = []
        for n in (1, 2, 3):
            await load(stack, write_version(tmp_path, n, reference=False))
            name = f"trl-policy-v{n}"
            await routed(stack, honest, name)
            await settled(stack)
            policy = (await status_of(stack))["adapters"]["policy"]
            states.append(policy["replicas"][faulty][name]["state"])
            assert policy["alarm"]  # the first suspicion raises it
        # Suspect three times: withheld at the third, never on one comparison.
        assert states == ["ok", "ok", "withheld"]
        assert await served_by(stack, "trl-policy-v3") == {honest}
        policy = (await status_of(stack))["adapters"]["policy"]
        assert all(v["state"] == "withheld" for v in policy["replicas"][faulty].values())


async def test_an_honest_fleet_is_never_withheld_nor_alarmed(tmp_path: Path) -> None:
    async with run_stack(sims=[HONEST, HONEST]) as stack:
        assert (await post(stack, "/v1/completions", completion(prompt=PROBE_IDS)))[0] == 200
        for n in range(1, 5):
            await load(stack, write_version(tmp_path, n, reference=n % 2 == 0))
        await wait_for(
            lambda: all("trl-policy-v4" in r.adapters for r in stack.pool), what="v4 routed"
        )
        policy = (await status_of(stack))["adapters"]["policy"]
        assert not policy["alarm"] and not any(policy["mismatches"].values())
        states = {v["state"] for versions in policy["replicas"].values() for v in versions.values()}
        assert states == {"ok"}
        assert len(await served_by(stack, "trl-policy-v4")) == 2


async def test_an_in_place_replace_is_routed_only_where_the_new_content_is_held(
    tmp_path: Path,
) -> None:
    """TRL's resume republishes ``trl-policy-v2`` with other weights under the same name: the
    digest changes, and while one replica still holds the old content (its mount has not shown
    the new files yet) every request for v2 goes to the one that holds the new, and names it."""
    async with run_stack(sims=[HONEST, {"adapter_receiver": False}]) as stack:
        fresh, slow = (sim.id for sim in stack.sims)

        async def mount_lag(seconds: float) -> None:  # the slow replica's bucket mount
            url = stack.sims[1].url + "/sim/faults"
            async with stack.session.post(url, json={"mount_lag_s": seconds}) as answer:
                assert answer.status == 200

        await load(stack, write_adapter(tmp_path / "old", "trl-policy-v2"))
        await mount_lag(3600)  # from now on its mount shows nothing new
        before = stack.pool.get(fresh).digests["trl-policy-v2"]  # type: ignore[union-attr]
        new = write_adapter(tmp_path / "new", "trl-policy-v2", rank=2)  # other weights
        replace = asyncio.create_task(
            post(stack, "/v1/load_lora_adapter", {**load_body("trl-policy-v2", new),
                                                  "load_inplace": True})
        )  # fmt: skip
        record = stack.pool.get(fresh)
        assert record is not None
        await wait_for(lambda: record.digests.get("trl-policy-v2") not in (None, before),
                       what="the new content routed where it is held")  # fmt: skip
        after = record.digests["trl-policy-v2"]
        assert await served_by(stack, "trl-policy-v2") == {fresh}  # never the old content
        _, _, headers = await post(stack, "/v1/completions", completion("trl-policy-v2"))
        assert headers[POLICY_HEADER] == f"trl-policy-v2@{after[:DIGEST_SHOWN]}"
        await mount_lag(0)  # the mount shows it at last
        status, body, _ = await asyncio.wait_for(replace, 30)
        assert status == 200, body
        await routed(stack, slow, "trl-policy-v2")
        assert stack.pool.get(slow).digests["trl-policy-v2"] == after  # type: ignore[union-attr]
        assert len(await served_by(stack, "trl-policy-v2", first=100)) == 2  # new keys


async def _load_with_rollouts(stack: Stack, tmp_path: Path, n: int) -> None:
    """Load ``trl-policy-vN`` while 12 rollouts for it wait at the proxy (TRL's first requests
    of a new version race its probes); all answered."""
    name = f"trl-policy-v{n}"
    loading = asyncio.create_task(load(stack, write_version(tmp_path, n, reference=False)))
    await wait_for(lambda: stack.proxy_app[PROXY].adapters.service.knows(name), what="loading")
    rollouts = [
        post(stack, "/v1/completions", completion(name, prompt=[key, 9, 8, 7]),
             headers={"X-Routing-Key": f"r{n}-{key}"})
        for key in range(12)
    ]  # fmt: skip
    answers = await asyncio.gather(*rollouts)
    await loading
    assert [status for status, _, _ in answers] == [200] * 12, answers[0][1]
    await settled(stack)


def _rollouts_served(stack: Stack, i: int, names: set[str]) -> list[str | None]:
    """The completions replica ``i`` served for ``names``, its probes (top logprobs) aside."""
    return [
        r.model
        for r in stack.sims[i].state.records
        if r.path == "/v1/completions" and r.model in names and not r.top_logprobs
    ]


async def test_a_replica_that_lost_trust_serves_no_rollout_of_a_later_version(
    tmp_path: Path,
) -> None:
    """Without a reference, once the replica serving the base is withheld (its third suspicion),
    it serves no rollout of any later version, though its probe answers before the honest
    replica's (here 0.2 s slower): its answer alone proves nothing, so it waits (``pending``) for
    the honest one's, and is judged, and withheld, then. Fails on a judge that calls nobody
    suspect while only the distrusted replica has answered (the liar was routed until the
    honest replica's probe came in)."""
    slow_honest: dict[str, Any] = {"faults": {"delay_s": 0.2}}
    async with run_stack(sims=[slow_honest, SERVES_BASE]) as stack:
        honest, faulty = (sim.id for sim in stack.sims)
        assert (await post(stack, "/v1/completions", completion(prompt=PROBE_IDS)))[0] == 200
        for n in (1, 2, 3):
            await load(stack, write_version(tmp_path, n, reference=False))
            await routed(stack, honest, f"trl-policy-v{n}")
            await settled(stack)
        later = {f"trl-policy-v{n}" for n in (4, 5, 6)}
        for n in (4, 5, 6):
            await _load_with_rollouts(stack, tmp_path, n)
        assert _rollouts_served(stack, 1, later) == []
        assert len(_rollouts_served(stack, 0, later)) == 36
        policy = (await status_of(stack))["adapters"]["policy"]
        assert {policy["replicas"][faulty][v]["state"] for v in later} == {"withheld"}
        assert policy["alarm"]


async def test_a_replica_that_lost_trust_earns_each_version_on_the_others_answer(
    tmp_path: Path,
) -> None:
    """The cost to a replica that lost trust and answers honestly again (here: the liar mended
    in place): each version is routed there only once another replica's answer for it is in,
    then judged ``ok``; while it waits it shows ``pending``. When no other replica can answer
    (the other drained), it is served on its own answer: training never stalls."""
    async with run_stack(sims=[HONEST, SERVES_BASE]) as stack:
        honest, mended = (sim.id for sim in stack.sims)
        assert (await post(stack, "/v1/completions", completion(prompt=PROBE_IDS)))[0] == 200
        for n in (1, 2, 3):
            await load(stack, write_version(tmp_path, n, reference=False))
            await settled(stack)
        url = stack.sims[1].url + "/sim/faults"
        async with stack.session.post(url, json={"policy": "honest"}) as answer:
            assert answer.status == 200
        await load(stack, write_version(tmp_path, 4, reference=False))
        await routed(stack, mended, "trl-policy-v4")
        await settled(stack)
        policy = (await status_of(stack))["adapters"]["policy"]
        assert policy["replicas"][mended]["trl-policy-v4"]["state"] == "ok"
        assert await served_by(stack, "trl-policy-v4", requests=24) == {honest, mended}
        # Alone (the honest replica drained): served on its own answer, the alarm stays.
        other = stack.pool.get(honest)
        assert other is not None
        stack.pool.drain(other, True)
        await load(stack, write_version(tmp_path, 5, reference=False))
        await routed(stack, mended, "trl-policy-v5")
        policy = (await status_of(stack))["adapters"]["policy"]
        assert policy["replicas"][mended]["trl-policy-v5"]["state"] == "ok"
        assert policy["alarm"]
