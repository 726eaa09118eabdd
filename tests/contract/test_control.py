"""vLLM's dev-mode control routes as TRL drives them around a weight sync."""

from __future__ import annotations

from tests.contract.support import Replica


async def test_pause_keep_and_resume_answer_their_status(replica: Replica) -> None:
    assert await replica.post_json("/pause?mode=keep") == (200, {"status": "paused"})
    assert await replica.post_json("/resume") == (200, {"status": "resumed"})


async def test_is_paused_follows_pause_and_resume(replica: Replica) -> None:
    await replica.post("/pause?mode=keep")
    paused = await replica.session.get(replica.url + "/is_paused")
    async with paused:
        assert await paused.json() == {"is_paused": True}
    await replica.post("/resume")
    async with replica.session.get(replica.url + "/is_paused") as resumed:
        assert await resumed.json() == {"is_paused": False}


async def test_an_adapter_loads_while_paused(replica: Replica) -> None:
    name = replica.unique("trl-policy")
    await replica.post("/pause?mode=keep")
    try:
        status, _ = await replica.load(name, replica.make_adapter(name))
        assert status == 200
    finally:
        await replica.post("/resume")
    answer = await replica.complete(model=name, prompt=replica.fresh_prompt(4), max_tokens=1)
    assert answer["model"] == name


async def test_reset_prefix_cache_answers_success_and_empties_the_cache(replica: Replica) -> None:
    prompt = replica.fresh_prompt(3 * replica.block_size)
    await replica.complete(prompt=prompt, max_tokens=1)
    assert await replica.post_json("/reset_prefix_cache") == (200, {"success": True})
    answer = await replica.complete(prompt=prompt, max_tokens=1)
    assert answer["usage"]["prompt_tokens_details"]["cached_tokens"] == 0


async def test_an_unknown_pause_mode_is_a_bad_request(replica: Replica) -> None:
    status, _ = await replica.post("/pause?mode=sideways")
    assert status == 400
