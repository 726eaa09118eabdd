"""Runtime LoRA loading and unloading, with vLLM's exact answers."""

from __future__ import annotations

import json

from tests.contract.support import Replica, assert_error


async def _listed(replica: Replica) -> dict[str, dict[str, object]]:
    status, raw = await replica.get("/v1/models")
    assert status == 200
    return {card["id"]: card for card in json.loads(raw)["data"]}


async def test_load_answers_plain_text_and_lists_the_adapter(replica: Replica) -> None:
    name = replica.unique("trl-policy")
    path = replica.make_adapter(name)
    status, body = await replica.load(name, path)
    assert (status, body.decode()) == (200, f"Success: LoRA adapter '{name}' added successfully.")
    card = (await _listed(replica))[name]
    assert card["root"] == str(path)
    assert card["parent"] == replica.model
    assert card["max_model_len"] is None
    assert card["object"] == "model"


async def test_models_lists_adapters_after_the_base_model(replica: Replica) -> None:
    names = [replica.unique("trl-policy") for _ in range(2)]
    for name in names:
        assert (await replica.load(name, replica.make_adapter(name)))[0] == 200
    ids = list(await _listed(replica))
    assert ids[0] == replica.model
    assert ids.index(names[0]) < ids.index(names[1])


async def test_a_loaded_adapter_serves_completions(replica: Replica) -> None:
    name = replica.unique("trl-policy")
    await replica.load(name, replica.make_adapter(name))
    answer = await replica.complete(model=name, prompt=replica.fresh_prompt(8), max_tokens=3)
    assert answer["model"] == name
    assert answer["usage"]["completion_tokens"] == 3


async def test_loading_a_taken_name_is_refused(replica: Replica) -> None:
    name = replica.unique("trl-policy")
    path = replica.make_adapter(name)
    await replica.load(name, path)
    status, raw = await replica.load(name, path)
    assert status == 400
    message = assert_error(json.loads(raw), 400, "InvalidUserInput")
    assert message == (
        f"The lora adapter '{name}' has already been loaded. If you want to load the adapter "
        "in place, set 'load_inplace' to True."
    )


async def test_load_inplace_replaces_a_taken_name(replica: Replica) -> None:
    name = replica.unique("trl-policy")
    await replica.load(name, replica.make_adapter(name))
    status, body = await replica.load(name, replica.make_adapter(), inplace=True)
    assert (status, body.decode()) == (200, f"Success: LoRA adapter '{name}' added successfully.")


async def test_loading_a_missing_path_is_not_found(replica: Replica) -> None:
    name = replica.unique("trl-policy")
    path = replica.adapter_root / "never-written"
    status, raw = await replica.load(name, path)
    assert status == 404
    message = assert_error(json.loads(raw), 404, "NotFoundError")
    # vLLM masks paths under /tmp, /home, ... as <path> in error messages.
    assert message in (
        f"Loading lora {name} failed: No adapter found for {path}",
        f"Loading lora {name} failed: No adapter found for <path>",
    )


async def test_loading_a_directory_without_adapter_config_is_not_found(replica: Replica) -> None:
    name = replica.unique("trl-policy")
    path = replica.adapter_root / name
    path.mkdir()
    status, raw = await replica.load(name, path)
    assert status == 404
    assert "No adapter found" in assert_error(json.loads(raw), 404, "NotFoundError")


async def test_load_without_a_path_is_a_bad_request(replica: Replica) -> None:
    status, raw = await replica.post("/v1/load_lora_adapter", {"lora_name": "x"})
    assert status == 400
    assert_error(json.loads(raw), 400)


async def test_loading_a_rank_above_max_lora_rank_fails_for_good(replica: Replica) -> None:
    name = replica.unique("trl-policy")
    status, raw = await replica.load(name, replica.make_adapter(name, rank=1024))
    assert status in (400, 500)
    assert "No adapter found" not in raw.decode()


async def test_unload_answers_plain_text_and_forgets_the_adapter(replica: Replica) -> None:
    name = replica.unique("trl-policy")
    await replica.load(name, replica.make_adapter(name))
    status, body = await replica.unload(name)
    assert (status, body.decode()) == (200, f"Success: LoRA adapter '{name}' removed successfully.")
    assert name not in await _listed(replica)
    status, _ = await replica.post(
        "/v1/completions", {"model": name, "prompt": [1, 2, 3], "max_tokens": 1}
    )
    assert status == 404


async def test_unloading_an_unknown_name_is_not_found(replica: Replica) -> None:
    name = replica.unique("nope")
    status, raw = await replica.unload(name)
    assert status == 404
    assert json.loads(raw) == {
        "error": {
            "message": f"The lora adapter '{name}' cannot be found.",
            "type": "NotFoundError",
            "param": None,
            "code": 404,
        }
    }


async def test_more_adapters_than_max_loras_load_and_stay_usable(replica: Replica) -> None:
    names = [replica.unique("trl-policy") for _ in range(replica.max_loras + 2)]
    for name in names:
        status, body = await replica.load(name, replica.make_adapter(name))
        assert status == 200, body
    assert set(names) <= set(await _listed(replica))
    for name in names:
        answer = await replica.complete(model=name, prompt=replica.fresh_prompt(4), max_tokens=1)
        assert answer["model"] == name
