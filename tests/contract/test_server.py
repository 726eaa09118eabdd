"""vLLM's informational routes: health, server info, models, metrics, unknown routes."""

from __future__ import annotations

import json

from tests.contract.support import EXTERNAL_URL, Replica


async def test_health_answers_200_with_an_empty_body(replica: Replica) -> None:
    status, body = await replica.get("/health")
    assert (status, body) == (200, b"")


async def test_server_info_reports_what_trl_reads(replica: Replica) -> None:
    status, raw = await replica.get("/server_info?config_format=json")
    assert status == 200
    info = json.loads(raw)
    assert set(info) >= {"vllm_config", "vllm_env", "system_env"}
    config = info["vllm_config"]
    assert set(config["lora_config"]) >= {"max_lora_rank", "max_loras", "max_cpu_loras"}
    assert config["lora_config"]["max_loras"] == replica.max_loras
    assert config["parallel_config"]["data_parallel_size"] == 1
    assert config["model_config"]["dtype"].startswith("torch.")
    assert config["cache_config"]["block_size"] == replica.block_size


async def test_server_info_defaults_to_a_text_config(replica: Replica) -> None:
    status, raw = await replica.get("/server_info")
    assert status == 200
    assert isinstance(json.loads(raw)["vllm_config"], str)


async def test_models_lists_the_base_model_first(replica: Replica) -> None:
    status, raw = await replica.get("/v1/models")
    assert status == 200
    listing = json.loads(raw)
    assert listing["object"] == "list"
    base = listing["data"][0]
    assert base["id"] == replica.model
    assert base["object"] == "model"
    assert base["owned_by"] == "vllm"
    assert base["parent"] is None
    assert base["max_model_len"] == replica.max_model_len
    assert isinstance(base["created"], int)


async def test_unknown_route_answers_404(replica: Replica) -> None:
    status, raw = await replica.get("/v1/no-such-route")
    assert status == 404
    assert json.loads(raw) == {"detail": "Not Found"}


async def test_metrics_use_vllm_names_and_labels(replica: Replica) -> None:
    await replica.complete(prompt=replica.fresh_prompt(20), max_tokens=2)
    status, raw = await replica.get("/metrics")
    assert status == 200
    text = raw.decode()
    for name in (
        "vllm:prefix_cache_queries_total",
        "vllm:prefix_cache_hits_total",
        "vllm:num_requests_running",
        "vllm:prompt_tokens_total",
        "vllm:generation_tokens_total",
    ):
        samples = [line for line in text.splitlines() if line.startswith(name + "{")]
        assert samples, name
        assert 'engine="' in samples[0] and f'model_name="{replica.model}"' in samples[0]


async def test_metrics_count_prompt_tokens_and_prefix_cache_hits(replica: Replica) -> None:
    prompt = replica.fresh_prompt(3 * replica.block_size + 5)
    before = await replica.metrics()
    await replica.complete(prompt=prompt, max_tokens=2)
    answer = await replica.complete(prompt=prompt, max_tokens=2)
    after = await replica.metrics()

    def delta(name: str) -> float:
        return after[name] - before.get(name, 0.0)

    cached = answer["usage"]["prompt_tokens_details"]["cached_tokens"]
    assert delta("vllm:prompt_tokens_total") >= 2 * len(prompt)
    assert delta("vllm:prefix_cache_queries_total") >= 2 * len(prompt)
    assert delta("vllm:prefix_cache_hits_total") >= cached > 0
    assert delta("vllm:generation_tokens_total") >= 4


async def test_version_and_tokenize_round_trip(replica: Replica) -> None:
    status, raw = await replica.get("/version")
    assert status == 200
    assert isinstance(json.loads(raw)["version"], str)
    status, answer = await replica.post_json("/tokenize", {"prompt": "Hello there"})
    assert status == 200
    assert answer["count"] == len(answer["tokens"]) > 0
    assert answer["max_model_len"] > 0
    status, back = await replica.post_json("/detokenize", {"tokens": answer["tokens"]})
    assert status == 200
    assert isinstance(back["prompt"], str)


async def test_get_world_size_answers_the_engines_ranks(replica: Replica) -> None:
    # vLLM's dev-mode route and TRL's vllm_serve answer the same shape; the proxy forwards it.
    for path in ("/get_world_size", "/get_world_size?include_dp=false"):
        status, raw = await replica.get(path)
        assert status == 200, path
        answer = json.loads(raw)
        assert list(answer) == ["world_size"] and isinstance(answer["world_size"], int)
        assert answer["world_size"] >= 1
        if EXTERNAL_URL is None:
            assert answer == {"world_size": 1}  # one simulated rank
