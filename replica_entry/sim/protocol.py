"""Request bodies of the generation routes, validated as vLLM validates them.

The pydantic models mirror vLLM's ``CompletionRequest``, ``ChatCompletionRequest`` and the
token-in ``GenerateRequest`` (lax types, unknown fields accepted and ignored);
``completion_job``, ``chat_job`` and ``tokens_job`` then apply vLLM's value checks and turn a
request into a ``GenerationJob``: token ids per prompt, the token budget per prompt (an explicit
``max_tokens`` must fit in ``max_model_len`` with the prompt), and the sampling knobs the
simulation honours. Every rejection is an ``ApiError`` with vLLM's status and wording.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from replica_entry.sim.errors import ApiError, from_validation
from replica_entry.sim.settings import SimSettings
from replica_entry.sim.tokenizer import encode_text, render_chat

MAX_LOGPROBS = 20  # vLLM's default --max-logprobs
# The simulation never samples an end token, so a request without max_tokens needs a bound.
DEFAULT_MAX_TOKENS = 16
_MAX_TOKEN_ID = 2**31 - 1


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="allow")
    include_usage: bool | None = False


class _GenerationRequest(BaseModel):
    model_config = ConfigDict(extra="allow")

    model: str | None = None
    n: int | None = 1
    max_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    min_p: float | None = None
    repetition_penalty: float | None = None
    seed: int | None = None
    stream: bool | None = False
    stream_options: StreamOptions | None = None
    return_token_ids: bool | None = False
    return_tokens_as_token_ids: bool | None = False


class CompletionRequest(_GenerationRequest):
    prompt: list[int] | list[list[int]] | str | list[str]
    max_tokens: int | None = 16
    logprobs: int | None = None


class ContentPart(BaseModel):
    model_config = ConfigDict(extra="allow")
    type: str
    text: str | None = None


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="allow")
    role: str
    content: str | list[ContentPart] | None = None

    def text(self) -> str:
        if self.content is None or isinstance(self.content, str):
            return self.content or ""
        return "".join(part.text or "" for part in self.content if part.type == "text")


class ChatRequest(_GenerationRequest):
    messages: list[ChatMessage]
    max_completion_tokens: int | None = None
    logprobs: bool | None = False
    top_logprobs: int | None = None
    add_generation_prompt: bool = True


class SamplingParams(BaseModel):
    model_config = ConfigDict(extra="allow")

    n: int = 1
    max_tokens: int | None = None
    temperature: float | None = None
    seed: int | None = None
    logprobs: int | None = None


class GenerateRequest(BaseModel):
    model_config = ConfigDict(extra="allow")

    token_ids: list[int] = Field(min_length=1)
    sampling_params: SamplingParams
    model: str | None = None
    stream: bool | None = False
    stream_options: StreamOptions | None = None
    return_token_ids: bool | None = None
    output_mode: Literal["tokens", "text"] = "tokens"


@dataclass(frozen=True, slots=True)
class GenerationJob:
    """What the engine runs: already tokenized, checked and clamped."""

    kind: Literal["completion", "chat"]
    model: str
    lora: str | None
    prompts: tuple[tuple[int, ...], ...]
    max_tokens: tuple[int, ...]
    n: int
    seed: int
    greedy: bool
    top_logprobs: int | None
    return_token_ids: bool
    stream: bool
    include_usage: bool
    tokens_as_ids: bool = False  # logprobs name tokens "token_id:N" (return_tokens_as_token_ids)
    policy: str = "base"  # whose logprobs it answers with (``sim.policy``)

    @property
    def steps(self) -> int:
        """Decode steps the request needs: its longest sequence."""
        return max(self.max_tokens)


R = TypeVar("R", bound=BaseModel)


def parse_request(model: type[R], payload: Any) -> R:
    """Validate a decoded JSON body against a request model (400 naming the field)."""
    if not isinstance(payload, dict):
        raise ApiError("The request body must be a JSON object.", param="body")
    try:
        return model.model_validate(payload)
    except ValidationError as exc:
        raise from_validation(exc) from None


def completion_prompts(request: CompletionRequest, vocab_size: int) -> list[list[int]]:
    """The token ids of each prompt of a completion request (a batch when a list of lists)."""
    prompt = request.prompt
    if isinstance(prompt, str):
        prompts = [encode_text(prompt, vocab_size)]
    elif prompt and isinstance(prompt[0], list):
        prompts = [list(p) for p in prompt if isinstance(p, list)]
    elif prompt and isinstance(prompt[0], str):
        prompts = [encode_text(p, vocab_size) for p in prompt if isinstance(p, str)]
    else:
        prompts = [[t for t in prompt if isinstance(t, int)]]
    for ids in prompts:
        _check_token_ids(ids)
    return prompts


def chat_prompt(request: ChatRequest, vocab_size: int) -> list[int]:
    """The token ids of a conversation, through the canonical chat template."""
    pairs = [(message.role, message.text()) for message in request.messages]
    ids = encode_text(render_chat(pairs, request.add_generation_prompt), vocab_size)
    _check_token_ids(ids)
    return ids


def _check_token_ids(ids: list[int]) -> None:
    if not ids:
        raise ApiError("Prompt cannot be empty", param="prompt")
    for token_id in ids:
        if not 0 <= token_id <= _MAX_TOKEN_ID:
            raise ApiError(f"Token id {token_id} is out of vocabulary", param="prompt")


def token_budgets(
    prompts: list[list[int]], max_tokens: int | None, max_model_len: int, default: int
) -> list[int]:
    """Each prompt's token budget, as vLLM 0.32 sets it: ``max_tokens`` (or ``default``, since
    the simulation never samples an end token) clamped to what the context leaves; a prompt that
    fills the context is refused for leaving no output token, a longer one for its length."""
    budgets = []
    for ids in prompts:
        room = max_model_len - len(ids)
        if room < 0:
            least = "at least " if room == -1 else ""
            raise ApiError(
                f"This model's maximum context length is {max_model_len} tokens. However, your "
                f"prompt contains {least}{len(ids)} input tokens, which exceeds this limit even "
                "without any output tokens. Please reduce the length of the input prompt. "
                f"(parameter=input_tokens, value={len(ids)})",
                param="input_tokens",
            )
        if room == 0:
            raise ApiError(
                "max_tokens must be at least 1, got 0. (parameter=max_tokens, value=0)",
                param="max_tokens",
            )
        budgets.append(min(default if max_tokens is None else max_tokens, room))
    return budgets


def check_sampling(request: _GenerationRequest, logprobs: int | None) -> int:
    """vLLM's ``SamplingParams`` checks; returns ``n``."""
    n = 1 if request.n is None else request.n
    if n < 1:
        raise ApiError(f"n must be at least 1, got {n}.", param="n")
    if request.max_tokens is not None and request.max_tokens < 1:
        raise ApiError(
            f"max_tokens must be at least 1, got {request.max_tokens}.", param="max_tokens"
        )
    if request.temperature is not None and request.temperature < 0:
        raise ApiError(
            f"temperature must be non-negative, got {request.temperature}.", param="temperature"
        )
    if logprobs is not None and logprobs < 0:
        raise ApiError(f"logprobs must be non-negative, got {logprobs}.", param="logprobs")
    if logprobs is not None and logprobs > MAX_LOGPROBS:
        raise ApiError(
            f"Requested sample logprobs of {logprobs}, which is greater than max allowed: "
            f"{MAX_LOGPROBS}",
            param="logprobs",
        )
    return n


def completion_job(
    request: CompletionRequest, *, served: str, lora: str | None, settings: SimSettings
) -> GenerationJob:
    """A checked completion request as an engine job (``served``: the model name to echo)."""
    n = check_sampling(request, request.logprobs)
    prompts = completion_prompts(request, settings.vocab_size)
    budgets = token_budgets(prompts, request.max_tokens, settings.max_model_len, DEFAULT_MAX_TOKENS)
    return _job(
        "completion", request, n, prompts, budgets, request.logprobs, served, lora, settings
    )


def chat_job(
    request: ChatRequest, *, served: str, lora: str | None, settings: SimSettings
) -> GenerationJob:
    """A checked chat request as an engine job; ``logprobs: true`` reports ``top_logprobs``."""
    if request.top_logprobs is not None and not request.logprobs:
        raise ApiError(
            "when using `top_logprobs`, `logprobs` must be set to true.", param="top_logprobs"
        )
    top = (request.top_logprobs or 0) if request.logprobs else None
    n = check_sampling(request, top)
    prompts = [chat_prompt(request, settings.vocab_size)]
    wanted = request.max_completion_tokens or request.max_tokens
    budgets = token_budgets(prompts, wanted, settings.max_model_len, DEFAULT_MAX_TOKENS)
    return _job("chat", request, n, prompts, budgets, top, served, lora, settings)


def tokens_job(
    request: GenerateRequest, *, served: str, lora: str | None, settings: SimSettings
) -> GenerationJob:
    """A checked token-in request as an engine job; only ``output_mode: "tokens"`` is served."""
    if request.output_mode != "tokens":
        raise ApiError("output_mode='text' is not simulated; use output_mode='tokens'.")
    _check_token_ids(request.token_ids)
    params = request.sampling_params
    if params.n < 1:
        raise ApiError(f"n must be at least 1, got {params.n}.", param="n")
    if params.max_tokens is not None and params.max_tokens < 1:
        raise ApiError(f"max_tokens must be at least 1, got {params.max_tokens}.")
    prompts = [list(request.token_ids)]
    budgets = token_budgets(prompts, params.max_tokens, settings.max_model_len, DEFAULT_MAX_TOKENS)
    return GenerationJob(
        kind="completion",
        model=served,
        lora=lora,
        prompts=(tuple(request.token_ids),),
        max_tokens=tuple(budgets),
        n=params.n,
        seed=settings.seed if params.seed is None else params.seed,
        greedy=params.temperature == 0,
        top_logprobs=params.logprobs,
        return_token_ids=bool(request.return_token_ids),
        stream=bool(request.stream),
        include_usage=bool(request.stream_options and request.stream_options.include_usage),
    )


def _job(
    kind: Literal["completion", "chat"],
    request: _GenerationRequest,
    n: int,
    prompts: list[list[int]],
    budgets: list[int],
    top_logprobs: int | None,
    served: str,
    lora: str | None,
    settings: SimSettings,
) -> GenerationJob:
    return GenerationJob(
        kind=kind,
        model=served,
        lora=lora,
        prompts=tuple(tuple(ids) for ids in prompts),
        max_tokens=tuple(budgets),
        n=n,
        seed=settings.seed if request.seed is None else request.seed,
        greedy=request.temperature == 0,
        top_logprobs=top_logprobs,
        return_token_ids=bool(request.return_token_ids),
        tokens_as_ids=bool(request.return_tokens_as_token_ids),
        stream=bool(request.stream),
        include_usage=bool(request.stream_options and request.stream_options.include_usage),
    )
