"""What a stream's ledger needs from one of vLLM's chunks, read on its bytes: no JSON parse.

``scan`` recognises the chunks vLLM writes in a completion or chat stream that carries the
token ids it was asked for (``return_token_ids``): compact JSON, one choice, a finish reason
(``null`` or a string), the choice's ``text`` or a chat delta of ``content`` only (a role
before it: a chat stream's first chunk), its ``token_ids`` after the finish reason or none at
all. For such a chunk it returns the chunk as the client gets it (the ids spliced out when the
proxy asked for them on the client's behalf), the token ids (the bytes between the brackets of
``"token_ids":[...]``, kept unparsed until a cut), the prompt's ids when the chunk carries
them, whether the tokens came without text (vLLM holds back the text of an incomplete
character: the ledger holds the chunk) and whether it is the last. Any other chunk (the usage
chunk, an error event, a delta with tool calls or reasoning, keys in another order or written
with spaces or escapes) is not recognised (``None``): the ledger parses it, as it parses every
chunk of a continuation. Recognising less costs a parse, never a wrong answer.

Why a key found on bytes is that key: inside a JSON string every ``"`` is escaped, so ``,"k":``
cannot lie inside a string; its quote opens a string (one that closed a string would follow the
string's text, not a comma), so the match is the key ``k`` of some object. The keys read here
occur in vLLM's chunk only on its choice (a chat stream's prompt ids: beside it), each once;
the one object with free keys, completions' ``top_logprobs``, maps token strings to numbers, so
a token spelled like a key is followed by a number, never by ``[``, ``"`` or ``null`` (and a
chunk that holds ``"token_ids"`` anywhere but after its finish reason is parsed).
``"prompt_token_ids"`` does not contain ``"token_ids"``. The chunk may come alone or inside its
SSE framing (``data: ...``): only the keys are looked at.

Cost: about one pass of C-level finds over the chunk's bytes, the keys looked for in vLLM's
order (a chat delta's content: one find more, and one per escaped quote in it), one more pass
while the prompt's ids are looked for (until found, or always when the ids are stripped), and
a splice when they are; nothing is parsed or copied but the ids' bytes.
"""

from __future__ import annotations

_FINISH_NULL = b',"finish_reason":null'
_FINISH = b',"finish_reason":"'
_IDS = b',"token_ids":['
_ANY_IDS = b'"token_ids"'
_PROMPT = b',"prompt_token_ids":['
_TEXT = b',"text":"'
_DELTA = b',"delta":{'
_ROLE = b'"role":"'
_CONTENT = b'"content":"'
_IDS_AT, _PROMPT_AT, _TEXT_AT, _DELTA_AT = len(_IDS), len(_PROMPT) - 1, len(_TEXT), len(_DELTA)
_QUOTE, _BACKSLASH = b'"', ord("\\")

# What ``scan`` finds: the chunk as the client gets it; its tokens' ids between the brackets,
# unparsed (b"": none); the prompt's ids as a JSON list when the chunk carries them; whether its
# tokens came without text (held); whether it is the last (a finish reason). A tuple: one is
# made per token.
Scan = tuple[bytes, bytes, bytes | None, bool, bool]


def scan(chunk: bytes, chat: bool, strip: bool, prompt: bool) -> Scan | None:
    """The ledger's facts of a recognised chunk, or None: parse it. ``strip``: splice the ids
    out; ``prompt``: look for the prompt's ids (else they are known and kept). The keys are
    looked for in vLLM's order (text, finish reason, token ids), each from the one before, so
    the chunk is read about once. The ids are not checked here: a cut parses them, and a stream
    whose ids do not read as integers is not continued."""
    text = chunk.find(_DELTA if chat else _TEXT)
    finish = chunk.find(_FINISH_NULL, text)
    finished = finish < 0
    if finished:
        finish = chunk.find(_FINISH, text)
    if text < 0 or finish < 0:
        return None
    if chat:
        empty = _content_empty(chunk, text + _DELTA_AT)
        if empty is None:
            return None
    else:
        empty = chunk.startswith(_QUOTE, text + _TEXT_AT)
    ids_at = chunk.find(_IDS, finish)
    ids_end = chunk.find(b"]", ids_at) + 1
    if ids_at < 0 or ids_end == 0:
        if _ANY_IDS in chunk:  # ids elsewhere, or not a list
            return None
        ids_at = ids_end = 0
    ids = chunk[ids_at + _IDS_AT : ids_end - 1] if ids_end else b""
    held = empty and not finished and ids != b""
    prompt_at = chunk.find(_PROMPT) if prompt else -1
    prompt_end = chunk.find(b"]", prompt_at) + 1 if prompt_at >= 0 else 0
    if prompt_at >= 0 and prompt_end == 0:
        return None
    found = chunk[prompt_at + _PROMPT_AT : prompt_end] if prompt_end else None
    if strip:
        chunk = _without(chunk, (ids_at, ids_end), (prompt_at, prompt_end))
    return chunk, ids, found, held, finished


def _without(chunk: bytes, ids: tuple[int, int], prompt: tuple[int, int]) -> bytes:
    """``chunk`` without its spans (each from its comma to its closing bracket; an empty end:
    none), the later cut first so that the earlier stays in place."""
    if not prompt[1]:
        return chunk[: ids[0]] + chunk[ids[1] :] if ids[1] else chunk
    for start, end in sorted((ids, prompt), reverse=True):  # no ids: (0, 0) cuts nothing
        chunk = chunk[:start] + chunk[end:]
    return chunk


def _content_empty(chunk: bytes, at: int) -> bool | None:
    """A chat delta whose members start at ``at`` and are ``content`` only (a ``role`` before
    it): is the content ``""``? None: another delta (tool calls, reasoning: parsed, judged
    there)."""
    if chunk.startswith(_ROLE, at):  # its string, a comma, then the content
        at = _string_end(chunk, at + len(_ROLE)) + 2
    if at < 2 or not chunk.startswith(_CONTENT, at):
        return None
    start = at + len(_CONTENT)
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
