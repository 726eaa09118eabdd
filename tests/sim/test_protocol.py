"""Request validation of the generation routes, without HTTP."""

from __future__ import annotations

from typing import Any

import pytest

from replica_entry.sim import SimSettings
from replica_entry.sim.errors import ApiError
from replica_entry.sim.protocol import (
    ChatRequest,
    CompletionRequest,
    chat_job,
    completion_job,
    parse_request,
)

SETTINGS = SimSettings(max_model_len=100)


def _job(body: dict[str, Any]) -> Any:
    request = parse_request(CompletionRequest, body)
    return completion_job(request, served="sim-model", lora=None, settings=SETTINGS)


def test_every_prompt_form_is_tokenized() -> None:
    assert _job({"prompt": [5, 6]}).prompts == ((5, 6),)
    assert _job({"prompt": [[5], [6, 7]]}).prompts == ((5,), (6, 7))
    assert _job({"prompt": "ab"}).prompts == ((97, 98),)
    assert _job({"prompt": ["a", "b"]}).prompts == ((97,), (98,))


def test_completion_defaults_follow_vllm() -> None:
    job = _job({"prompt": [1]})
    assert (job.n, job.max_tokens, job.top_logprobs, job.stream) == (1, (16,), None, False)
    assert job.seed == SETTINGS.seed


def test_without_max_tokens_the_budget_is_what_the_context_leaves() -> None:
    assert _job({"prompt": list(range(95)), "max_tokens": None}).max_tokens == (5,)


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"prompt": []}, "prompt"),
        ({"prompt": [-1]}, "prompt"),
        ({"prompt": 3}, "prompt"),
        ({"prompt": [1], "n": 0}, "n"),
        ({"prompt": [1], "max_tokens": 0}, "max_tokens"),
        ({"prompt": [1], "temperature": -0.5}, "temperature"),
        ({"prompt": [1], "logprobs": 21}, "logprobs"),
        ({"prompt": [1], "logprobs": -1}, "logprobs"),
        ({"prompt": list(range(100)), "max_tokens": 11}, "max_tokens"),
        ({"prompt": list(range(101)), "max_tokens": None}, "input_tokens"),
        ({}, "prompt"),
    ],
)
def test_invalid_requests_are_400_naming_the_parameter(body: dict[str, Any], param: str) -> None:
    with pytest.raises(ApiError) as exc:
        _job(body)
    assert (exc.value.status, exc.value.param) == (400, param)


def test_a_body_that_is_not_an_object_is_refused() -> None:
    with pytest.raises(ApiError, match="JSON object"):
        parse_request(CompletionRequest, [1, 2])


def test_chat_messages_render_and_logprobs_are_optional() -> None:
    body = {"messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]}
    request = parse_request(ChatRequest, {**body, "logprobs": True, "top_logprobs": 3})
    job = chat_job(request, served="m", lora="m", settings=SETTINGS)
    assert job.kind == "chat"
    assert job.top_logprobs == 3
    assert bytes(job.prompts[0]).decode().endswith("<|im_start|>assistant\n")
    plain = chat_job(parse_request(ChatRequest, body), served="m", lora=None, settings=SETTINGS)
    assert plain.top_logprobs is None


def test_chat_top_logprobs_need_logprobs() -> None:
    body = {"messages": [{"role": "user", "content": "hi"}], "top_logprobs": 2}
    with pytest.raises(ApiError) as exc:
        chat_job(parse_request(ChatRequest, body), served="m", lora=None, settings=SETTINGS)
    assert exc.value.param == "top_logprobs"
