"""Which streamed generations can be continued on another replica, and how they are continued.

A streamed completion (``/v1/completions``) or chat completion (``/v1/chat/completions``) whose
replica dies or is ejected mid-stream is continued elsewhere (``proxy.dataplane.migration``): the
prompt's token ids plus the tokens the client was already sent become the prompt of a streamed
``/v1/completions`` request to another replica holding the same model, with ``max_tokens`` (and
``min_tokens``) reduced by what was sent. vLLM reports the ids with ``return_token_ids`` (the
prompt's in the first chunk, each chunk's own tokens with it), so the proxy asks for them when
the client did not (and strips them from what it forwards). A chat request continues through the
completions API too: its prompt ids are the chat template already applied, so no template is
needed here, and the continuation's chunks are rewritten into chat chunks.

A request is continued only where the continuation samples from the same distribution as the
original would have, and the text the client sees stays whole. Not continued (cut as vLLM cuts
it): ``n`` > 1 or several prompts (several sequences share one stream); ``stop`` strings (vLLM
holds back text that may begin a stop string, unseen by the proxy); ``presence_penalty`` or
``frequency_penalty`` (they count the output tokens, which would become prompt); ``echo``,
``prompt_logprobs``, structured outputs (their state would restart), beam search; chat requests
with ``tools`` or ``logprobs`` (their parsing lives in vLLM's chat server). A ``seed`` is passed
on but cannot be carried over exactly: the continuation draws from a new generator.

Cost per streamed request: the decision reads every field but the prompt, found on the bytes
(as ``proxy.routing.peek`` finds it) and skipped when it is a flat list of token ids, so the
prompt, the part that grows, is never turned into Python objects; any other body is parsed
whole (a chat request's messages: orjson parses them faster than a skip in Python). The ids
are asked for by a splice (``,"return_token_ids":true`` before the closing brace), not a
re-serialisation. The body is parsed whole only at a cut, to build the continuation.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Literal

import orjson

Kind = Literal["completion", "chat"]
KINDS: dict[str, Kind] = {"completions": "completion", "chat_completions": "chat"}
COMPLETIONS_PATH = "/v1/completions"
VLLM_COMPLETION_MAX_TOKENS = 16  # vLLM's completions default when a request names none
# Sampling parameters a chat request passes to its continuation (the rest are the chat API's).
CHAT_SAMPLING = (
    "temperature", "top_p", "top_k", "min_p", "seed", "repetition_penalty", "stop_token_ids",
    "ignore_eos", "skip_special_tokens", "spaces_between_special_tokens", "logit_bias",
    "allowed_token_ids", "bad_words", "user", "priority", "stream_options",
    "include_stop_str_in_output", "vllm_xargs",
)  # fmt: skip
_NOT_WITH = frozenset((
    "stop", "presence_penalty", "frequency_penalty", "echo", "prompt_logprobs", "best_of",
    "use_beam_search", "response_format", "structured_outputs", "guided_json", "guided_regex",
    "guided_choice", "guided_grammar", "tools", "logprobs", "top_logprobs",
))  # fmt: skip
_PROMPT = re.compile(rb'"prompt"[ \t\r\n]*:[ \t\r\n]*')
_ASK_IDS = b',"return_token_ids":true}'
_CHAT_ALLOWS = frozenset({"top_logprobs"})  # meaningless without chat ``logprobs``
_COMPLETION_ALLOWS = frozenset({"logprobs", "top_logprobs"})  # completions' logprobs carry over


@dataclass(slots=True)  # made per request: not frozen (see proxy/__init__.py)
class Resumable:
    """A streamed request that can be continued elsewhere, as the proxy sends it."""

    kind: Kind
    body: bytes  # the request as sent upstream (``return_token_ids`` on), parsed at a cut
    wants_ids: bool  # the client asked for the token ids itself: they stay in its stream
    max_tokens: int | None  # None: up to the model's context
    min_tokens: int
    include_usage: bool  # the client asked for a final usage chunk

    def continuation(self, prompt_ids: list[int], sent: list[int]) -> bytes:
        """The body that continues this request after ``sent`` (the prompt's ids and the
        tokens the client has), as a streamed ``/v1/completions`` request."""
        request = orjson.loads(self.body)
        if self.kind == "completion":
            body = request
        else:
            body = {key: request[key] for key in CHAT_SAMPLING if key in request}
            body["model"] = request.get("model")
        body["prompt"] = [*prompt_ids, *sent]
        body["max_tokens"] = None if self.max_tokens is None else self.max_tokens - len(sent)
        if self.min_tokens:
            body["min_tokens"] = max(self.min_tokens - len(sent), 0)
        body["stream"] = True
        body["return_token_ids"] = True
        return orjson.dumps(body)

    def left(self, sent: int) -> int | None:
        """Tokens still to generate after ``sent``; None: no limit."""
        return None if self.max_tokens is None else self.max_tokens - sent


def resumable(route: str, body: bytes) -> tuple[Resumable, bytes] | None:
    """The plan for a streamed request on ``route`` and the body to send for it (token ids
    asked for), or None when it cannot be continued (see the module's docstring)."""
    kind = KINDS.get(route)
    if kind is None:
        return None
    request = _fields(body, kind)
    if request is None or request.get("stream") is not True:
        return None
    if not _continuable(kind, request):
        return None
    min_tokens = request.get("min_tokens") or 0
    try:
        max_tokens = _max_tokens(kind, request)
    except ValueError:
        return None  # the replica answers it 400
    if not isinstance(min_tokens, int):
        return None
    wants_ids = request.get("return_token_ids") is True
    if not wants_ids:
        body = _asking_ids(body, request)
    options = request.get("stream_options")
    usage = isinstance(options, dict) and options.get("include_usage") is True
    return Resumable(kind, body, wants_ids, max_tokens, min_tokens, usage), body


def _fields(body: bytes, kind: Kind) -> dict[str, Any] | None:
    """The request's fields; None: not a JSON object (the replica answers it 400). A
    completion's first ``"prompt"`` whose value is a flat list (of token ids: no bracket, brace
    or quote inside) is read as ``0``, unparsed: a ``"prompt"`` nested in another field would
    be too, which changes nothing decided here (only top-level fields are, and a nested value
    stays what it was: non-empty)."""
    found = _PROMPT.search(body) if kind == "completion" else None
    if found is not None and body.startswith(b"[", found.end()):
        start, close = found.end(), body.find(b"]", found.end())
        if close > 0 and _flat(body, start + 1, close):
            body = body[:start] + b"0" + body[close + 1 :]
    try:
        request = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    return request if isinstance(request, dict) else None


def _flat(body: bytes, start: int, end: int) -> bool:
    """``body[start:end]`` holds no bracket, brace or quote: numbers only (C-level finds)."""
    find = body.find
    return find(b"[", start, end) < 0 and find(b"{", start, end) < 0 and find(b'"', start, end) < 0


def _asking_ids(body: bytes, request: dict[str, Any]) -> bytes:
    """``body`` with ``return_token_ids`` on: spliced in last, or, when the client set it to
    something else (which a duplicate key would leave to the parser), set and re-serialised."""
    if "return_token_ids" in request:
        whole = orjson.loads(body)
        whole["return_token_ids"] = True
        return orjson.dumps(whole)
    kept = body.rstrip()
    return kept[:-1] + _ASK_IDS


def _continuable(kind: Kind, request: dict[str, Any]) -> bool:
    if request.get("n") not in (None, 1):
        return False
    allows = _CHAT_ALLOWS if kind == "chat" else _COMPLETION_ALLOWS
    for key in _NOT_WITH.intersection(request):  # set, and not to a JSON false, 0 or empty
        if key not in allows and request[key]:
            if key == "response_format" and request[key] == {"type": "text"}:
                continue
            return False
    if kind == "completion":
        prompt = request.get("prompt")
        if isinstance(prompt, list) and prompt and not isinstance(prompt[0], int):
            return len(prompt) == 1  # a list of prompts: one is fine
    return True


def _max_tokens(kind: Kind, request: dict[str, Any]) -> int | None:
    """The request's token budget (None: unlimited); ValueError when it is not one."""
    if kind == "completion":
        value = request.get("max_tokens", VLLM_COMPLETION_MAX_TOKENS)
    else:
        value = request.get("max_completion_tokens", request.get("max_tokens"))
    if value is None or (isinstance(value, int) and not isinstance(value, bool) and value > 0):
        return value
    raise ValueError(value)
