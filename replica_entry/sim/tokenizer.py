"""The simulated tokenizer: deterministic, reversible enough to read, and prefix-preserving.

Text is tokenized byte by byte (UTF-8), each byte ``b`` becoming token ``b % vocab_size``, so a
prompt that extends another tokenizes to a sequence that extends the other's: multi-turn
conversations keep their KV prefix, as with a real tokenizer. Chat messages are rendered
through one fixed ChatML-like template before tokenizing (the canonical form the prefix cache
sees). A token id decodes to the piece ``" t<id>"``; generated text is the join of its pieces.
Cost: O(bytes) per prompt.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence


def encode_text(text: str, vocab_size: int) -> list[int]:
    """Token ids of ``text``: one per UTF-8 byte, folded into the vocabulary."""
    data = text.encode()
    if vocab_size >= 256:
        return list(data)
    return [byte % vocab_size for byte in data]


def render_chat(messages: Iterable[tuple[str, str]], add_generation_prompt: bool) -> str:
    """The canonical text of a conversation of ``(role, content)`` pairs."""
    parts = [f"<|im_start|>{role}\n{content}<|im_end|>\n" for role, content in messages]
    if add_generation_prompt:
        parts.append("<|im_start|>assistant\n")
    return "".join(parts)


def piece(token_id: int) -> str:
    """The text of one generated token."""
    return f" t{token_id}"


def decode(token_ids: Sequence[int]) -> str:
    return "".join(piece(token_id) for token_id in token_ids)
