"""What a stream's ledger needs from one of vLLM's token chunks, read on its bytes: no JSON parse.

``scan`` recognises the chunk vLLM writes for each token of a completion or chat stream (compact
JSON, one choice, ``"finish_reason":null``, the token ids asked for with ``return_token_ids``,
and for chat a delta that is only ``content``). For such a chunk it returns the chunk as the
client gets it (the ids spliced out when the proxy asked for them on the client's behalf), the
token ids (the bytes between the brackets of ``"token_ids":[...]``, kept unparsed until a cut),
the prompt's ids when the chunk carries them, and whether the tokens came without text (vLLM
holds back the text of an incomplete character: the ledger holds the chunk). Any other chunk (a
chat stream's role chunk, a finish, the usage chunk, an error event, keys written with spaces or
escapes, or first in their object) is not recognised (``None``): the ledger parses it, as it
parses every chunk of a continuation. Recognising less costs a parse, never a wrong answer.

Why a key found on bytes is that key: inside a JSON string every ``"`` is escaped, so ``,"k":``
cannot lie inside a string; its quote opens a string (one that closed a string would follow the
string's text, not a comma), so the match is the key ``k`` of some object. The keys read here
occur in vLLM's chunk only on its choice (a chat stream's prompt ids: beside it), each once;
the one object with free keys, completions' ``top_logprobs``, maps token strings to numbers, so
a token spelled like a key is followed by a number, never by ``[``, ``"`` or ``null``.
``"prompt_token_ids"`` does not contain ``,"token_ids"``. The chunk may come alone or inside
its SSE framing (``data: ...``): only the keys are looked at.

Cost: about one pass of C-level finds over the chunk's bytes, the keys looked for in vLLM's
order (a chat delta's content: one find more, and one per escaped quote in it), one more pass
while the prompt's ids are looked for (until found, or always when the ids are stripped), and
a splice when they are; nothing is parsed or copied but the ids' bytes.
"""

from __future__ import annotations

_FINISH_NULL = b',"finish_reason":null'
_FINISH = b',"finish_reason":"'
_IDS = b',"token_ids":['
_PROMPT = b',"prompt_token_ids":['
_TEXT = b',"text":"'
_CONTENT = b',"delta":{"content":"'
_IDS_AT, _PROMPT_AT, _TEXT_AT, _CONTENT_AT = len(_IDS), len(_PROMPT) - 1, len(_TEXT), len(_CONTENT)
_QUOTE, _BACKSLASH = b'"', ord("\\")

# What ``scan`` finds: the chunk as the client gets it; its tokens' ids between the brackets,
# unparsed (b"": none); the prompt's ids as a JSON list when the chunk carries them; whether its
# tokens came without text (held); whether it is the last (a finish reason). A tuple: one is
# made per token.
Scan = tuple[bytes, bytes, bytes | None, bool, bool]


def scan(chunk: bytes, chat: bool, strip: bool, prompt: bool) -> Scan | None:
    """The ledger's facts of a recognised token chunk, or None: parse it. ``strip``: splice the
    ids out; ``prompt``: look for the prompt's ids (else they are known and kept). The keys are
    looked for in vLLM's order (text, finish reason, token ids), each from the one before, so
    the chunk is read about once. The ids are not checked here: a cut parses them, and a stream
    whose ids do not read as integers is not continued."""
    text = chunk.find(_CONTENT if chat else _TEXT)
    finish = chunk.find(_FINISH_NULL, text)
    finished = finish < 0
    if finished:
        finish = chunk.find(_FINISH, text)
    ids_at = chunk.find(_IDS, finish)
    ids_end = chunk.find(b"]", ids_at)
    if text < 0 or finish < 0 or ids_at < 0 or ids_end < 0:
        return None
    if chat:
        empty = _content_empty(chunk, text + _CONTENT_AT)
        if empty is None:
            return None
    else:
        empty = chunk.startswith(_QUOTE, text + _TEXT_AT)
    ids = chunk[ids_at + _IDS_AT : ids_end]
    held = empty and not finished and ids != b""
    prompt_at = chunk.find(_PROMPT) if prompt else -1
    if prompt_at < 0:
        if strip:  # the span starts at its comma
            chunk = chunk[:ids_at] + chunk[ids_end + 1 :]
        return chunk, ids, None, held, finished
    prompt_end = chunk.find(b"]", prompt_at) + 1
    if prompt_end == 0:
        return None
    found = chunk[prompt_at + _PROMPT_AT : prompt_end]
    if strip:  # the later span first, so that the earlier one stays in place
        for start, end in sorted(((ids_at, ids_end + 1), (prompt_at, prompt_end)), reverse=True):
            chunk = chunk[:start] + chunk[end:]
    return chunk, ids, found, held, finished


def _content_empty(chunk: bytes, start: int) -> bool | None:
    """A chat delta whose content's text starts at ``start`` and that is only ``content``: is
    that ``""``? None: another delta (a role, tool calls, reasoning: parsed and judged there)."""
    end = _string_end(chunk, start)
    if end < 0 or not chunk.startswith(b"}", end + 1):
        return None
    return end == start


def _string_end(chunk: bytes, start: int) -> int:
    """The index of the quote that closes the string whose text starts at ``start``; -1: none."""
    quote = chunk.find(_QUOTE, start)
    while quote > 0:
        back = quote - 1
        while chunk[back] == _BACKSLASH:
            back -= 1
        if (quote - 1 - back) % 2 == 0:  # an even run of backslashes escapes nothing
            return quote
        quote = chunk.find(_QUOTE, quote + 1)
    return -1
