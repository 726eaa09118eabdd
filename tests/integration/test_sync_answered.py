"""TRL's sync through the proxy without freezing the fleet: the pause and resume answered from
the proxy's state, the unload answered at once and carried out behind, in order; and
``--forward-pause``, which restores the freeze."""

from __future__ import annotations

import asyncio
from pathlib import Path

import orjson

from proxy.app import PROXY
from tests.support.adapters import write_adapter
from tests.support.calls import completion, listed, load_body, metric_value, post
from tests.support.clock import FakeClock
from tests.support.fleet import Stack, run_stack
from tests.support.waiting import eventually, wait_for

FROZEN_WAIT_S = 0.3  # how long a frozen link is watched for a load that must not arrive


def _calls(stack: Stack, i: int, path: str) -> list[str | None]:
    """The models named in replica ``i``'s calls to ``path``, oldest first."""
    return [r.model for r in stack.sims[i].state.records if r.path == path]


async def _loading_on(stack: Stack, i: int, name: str) -> None:
    async def asked() -> bool:
        return name in _calls(stack, i, "/v1/load_lora_adapter")

    await eventually(asked, what=f"the load of {name} on replica {i}")


async def test_pause_is_answered_while_requests_keep_flowing(tmp_path: Path) -> None:
    async with run_stack(2) as stack:
        status, body, _ = await post(stack, "/pause?mode=keep", b"")
        assert status == 200 and orjson.loads(body)["status"] == "paused"
        # No replica was asked, none is frozen, and a request started now runs to its end.
        assert not _calls(stack, 0, "/pause") and not _calls(stack, 1, "/pause")
        assert not any(sim.state.engine.gate.paused for sim in stack.sims)
        for _ in range(4):
            assert (await post(stack, "/v1/completions", completion()))[0] == 200
        path = write_adapter(tmp_path, "trl-policy-v1")
        status, body, _ = await post(
            stack, "/v1/load_lora_adapter", load_body("trl-policy-v1", path)
        )
        assert status == 200, body
        assert (await post(stack, "/resume", b""))[0] == 200
        assert not _calls(stack, 0, "/resume") and not _calls(stack, 1, "/resume")
        text = stack.proxy_app[PROXY].page.render().decode()
        assert metric_value(text, "rollout_proxy_sync_window_seconds_count") == 1
        assert metric_value(text, "rollout_proxy_sync_paused_seconds_count") == 0
        assert metric_value(text, "rollout_proxy_paused_seconds_total") == 0
        # A mode vLLM does not know is refused, as vLLM would.
        status, body, _ = await post(stack, "/pause?mode=freeze", b"")
        assert status == 400 and b"mode" in body


async def test_forward_pause_freezes_the_fleet() -> None:
    clock = FakeClock()  # the frozen time is the proxy's clock's: 2.5 s, however fast the calls
    async with run_stack(2, forward_pause=True, clock=clock) as stack:
        status, body, _ = await post(stack, "/pause?mode=keep", b"")
        assert (status, orjson.loads(body)) == (200, {"status": "paused"})  # vLLM's own answer
        assert all(sim.state.engine.gate.paused for sim in stack.sims)
        clock.advance(2.5)
        assert (await post(stack, "/resume", b""))[0] == 200
        assert not any(sim.state.engine.gate.paused for sim in stack.sims)
        status_page = await (await stack.session.get(stack.proxy_url + "/proxy/status")).json()
        assert status_page["syncs"]["pause"] == "forwarded"
        assert status_page["syncs"]["paused_s"] == 2.5
        text = stack.proxy_app[PROXY].page.render().decode()
        assert metric_value(text, "rollout_proxy_sync_paused_seconds_count") == 1


async def test_unload_is_answered_at_once_and_done_before_a_later_load(tmp_path: Path) -> None:
    async with run_stack(2, relays=True) as stack:
        v1 = write_adapter(tmp_path, "trl-policy-v1")
        assert (await post(stack, "/v1/load_lora_adapter", load_body("trl-policy-v1", v1)))[
            0
        ] == 200
        stack.relays[0].freeze()  # replica 0 hears nothing for now
        # TRL's unload is answered though replica 0 cannot be reached to carry it out yet.
        status, _, _ = await post(stack, "/v1/unload_lora_adapter", {"lora_name": "trl-policy-v1"})
        assert status == 200

        async def gone_from_replica_1() -> bool:
            return "trl-policy-v1" not in await listed(stack, 1)

        await eventually(gone_from_replica_1, what="the unload on replica 1")
        # A load that comes later waits, on each replica, for the unloads answered before it
        # there: replica 1 (done) loads it at once, replica 0 only after its unload.
        v2 = write_adapter(tmp_path, "trl-policy-v2")
        later = asyncio.create_task(
            post(stack, "/v1/load_lora_adapter", load_body("trl-policy-v2", v2))
        )

        await _loading_on(stack, 1, "trl-policy-v2")  # it owes no unload
        done, _ = await asyncio.wait({later}, timeout=FROZEN_WAIT_S)
        assert not done  # all or nothing: replica 0 has not loaded it
        stack.relays[0].thaw()
        status, body, _ = await later
        assert status == 200, body
        calls = [(r.path, r.model) for r in stack.sims[0].state.records if r.model]
        assert calls.index(("/v1/unload_lora_adapter", "trl-policy-v1")) < calls.index(
            ("/v1/load_lora_adapter", "trl-policy-v2")
        )
        for i in range(2):
            assert _calls(stack, i, "/v1/unload_lora_adapter") == ["trl-policy-v1"]
            assert "trl-policy-v2" in await listed(stack, i)
            assert "trl-policy-v1" not in await listed(stack, i)


async def test_an_answered_unload_is_carried_out_on_shutdown(tmp_path: Path) -> None:
    """TRL exits right after its last sync: the proxy's shutdown still carries out the unloads it
    answered (within ``UNLOAD_DRAIN_S``) rather than leaving the replica one adapter over."""
    async with run_stack(2, relays=True) as stack:
        v1 = write_adapter(tmp_path, "trl-policy-v1")
        assert (await post(stack, "/v1/load_lora_adapter", load_body("trl-policy-v1", v1)))[
            0
        ] == 200
        stack.relays[0].freeze()
        status, _, _ = await post(stack, "/v1/unload_lora_adapter", {"lora_name": "trl-policy-v1"})
        assert status == 200
        closing = asyncio.create_task(stack.proxy_app[PROXY].adapters.service.close())
        done, _ = await asyncio.wait({closing}, timeout=FROZEN_WAIT_S)
        assert not done  # the shutdown waits for the unload it owes replica 0
        stack.relays[0].thaw()
        await closing
        assert _calls(stack, 0, "/v1/unload_lora_adapter") == ["trl-policy-v1"]
        assert "trl-policy-v1" not in await listed(stack, 0)


async def test_an_unload_while_its_name_loads_is_the_last_word_and_costs_nothing_more(
    tmp_path: Path,
) -> None:
    """TRL's last word on a name is what holds, whatever the replicas answer first: an unload
    that arrives while the load of its name waits (here on a replica that still owes an older
    unload) is a change of the plan. The load is answered (superseded: 200), the name ends
    unloaded everywhere, a replica that had loaded it unloads it after its load, and the replica
    that had not loaded it yet never loads it only to unload it."""
    async with run_stack(2, relays=True) as stack:
        v1 = write_adapter(tmp_path, "trl-policy-v1")
        assert (await post(stack, "/v1/load_lora_adapter", load_body("trl-policy-v1", v1)))[
            0
        ] == 200
        stack.relays[0].freeze()
        assert (await post(stack, "/v1/unload_lora_adapter", {"lora_name": "trl-policy-v1"}))[
            0
        ] == 200
        v2 = write_adapter(tmp_path, "trl-policy-v2")
        loading = asyncio.create_task(
            post(stack, "/v1/load_lora_adapter", load_body("trl-policy-v2", v2))
        )

        await _loading_on(stack, 1, "trl-policy-v2")
        status, _, _ = await post(stack, "/v1/unload_lora_adapter", {"lora_name": "trl-policy-v2"})
        assert status == 200  # the name is being loaded: known
        assert (await loading)[0] == 200  # answered at once: superseded, not waiting on 0
        stack.relays[0].thaw()
        await stack.proxy_app[PROXY].adapters.service.settled()
        for i in range(2):
            assert "trl-policy-v2" not in await listed(stack, i)
        calls = [(r.path, r.model) for r in stack.sims[1].state.records if r.model]
        assert calls.index(("/v1/load_lora_adapter", "trl-policy-v2")) < calls.index(
            ("/v1/unload_lora_adapter", "trl-policy-v2")
        )
        assert _calls(stack, 0, "/v1/load_lora_adapter") == ["trl-policy-v1"]
        assert _calls(stack, 0, "/v1/unload_lora_adapter") == ["trl-policy-v1"]
        assert "trl-policy-v2" not in stack.proxy_app[PROXY].adapters.service.versions


async def test_a_repeated_unload_costs_the_replica_nothing_more(tmp_path: Path) -> None:
    """A client repeating an unload while the first cannot be carried out (replica 0 frozen)
    costs nothing more: the name is simply not wanted, and the replica's agent unloads it once.
    An unload after a later load of the name is a new one: unload, unload, load, unload leaves
    the name unloaded, and the load between them was carried out before the last unload."""
    async with run_stack(1, relays=True) as stack:
        service = stack.proxy_app[PROXY].adapters.service
        v1 = write_adapter(tmp_path, "trl-policy-v1")
        body = load_body("trl-policy-v1", v1)
        assert (await post(stack, "/v1/load_lora_adapter", body))[0] == 200
        stack.relays[0].freeze()
        unload = {"lora_name": "trl-policy-v1"}
        answers = [await post(stack, "/v1/unload_lora_adapter", unload) for _ in range(40)]
        assert [status for status, _, _ in answers] == [200] * 40
        stack.relays[0].thaw()
        await service.settled()
        assert _calls(stack, 0, "/v1/unload_lora_adapter") == ["trl-policy-v1"]
        assert "trl-policy-v1" not in await listed(stack, 0)
        # Unload, unload, load (held up on the frozen replica), unload: the last word holds.
        assert (await post(stack, "/v1/load_lora_adapter", body))[0] == 200
        stack.relays[0].freeze()
        for _ in range(2):
            assert (await post(stack, "/v1/unload_lora_adapter", unload))[0] == 200
        load = asyncio.create_task(post(stack, "/v1/load_lora_adapter", body))
        await wait_for(lambda: service.knows("trl-policy-v1"), what="the load queued")
        assert (await post(stack, "/v1/unload_lora_adapter", unload))[0] == 200
        stack.relays[0].thaw()
        assert (await load)[0] == 200
        await service.settled()
        calls = [(r.path, r.model) for r in stack.sims[0].state.records if r.model]
        last_load = max(i for i, c in enumerate(calls) if c[0] == "/v1/load_lora_adapter")
        assert calls[last_load + 1 :] == [("/v1/unload_lora_adapter", "trl-policy-v1")]
        assert len(_calls(stack, 0, "/v1/unload_lora_adapter")) <= 3
        assert "trl-policy-v1" not in await listed(stack, 0)
        assert "trl-policy-v1" not in service.versions
