"""Build a tiny causal LM and its tokenizer locally, deterministic from a seed (no download).

``python -m trainer_entry.tiny_model OUT_DIR [--seed 0]`` writes a Llama-architecture model and
a fast tokenizer that TRL's AsyncGRPOTrainer and vLLM's CPU build both accept:

- Tokenizer: byte-level BPE (vocabulary ``vocab_size``, ~1k; ASCII characters only, see
  ``_ascii_alphabet``) trained with ``tokenizers`` on a generated corpus of chat-shaped
  arithmetic, wrapped as ``PreTrainedTokenizerFast`` with the special tokens ``<|endoftext|>``,
  ``<|im_start|>``, ``<|im_end|>`` and TRL's bundled Qwen2.5 chat template: TRL's rollout
  worker recognises only the chat templates it ships.
- Model: ``LlamaConfig`` with hidden size 64, 2 layers, 2 heads of head size 32 (vLLM's CPU
  attention needs head size >= 32), float32, weights drawn from ``torch.manual_seed(seed)``.

``--adapter DIR`` also writes a real PEFT LoRA adapter of that model (for tests that need vLLM to
load one). Same seed, same bytes: the corpus comes from ``random.Random(seed)`` and BPE training is
deterministic for a fixed corpus. ``python -m trainer_entry.tiny_model`` takes 6-17 s on 2 cores,
torch's import most of it.
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence
from pathlib import Path

from proxy.config.programs import OneLineParser, help_text

SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
SYSTEM_PROMPT = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."
WORDS = (
    *("what", "is", "the", "sum", "of", "and", "plus", "minus", "times", "answer", "number"),
    *("compute", "please", "think", "step", "by", "first", "then", "so", "we", "get", "result"),
    *("final", "add", "take", "away", "multiply", "total", "value", "equals"),
)


def corpus(seed: int, lines: int = 4000) -> Iterator[str]:
    """Chat-shaped arithmetic and filler sentences, the text the tokenizer learns from."""
    rng = random.Random(seed)
    for _ in range(lines):
        a, b = rng.randrange(100), rng.randrange(100)
        op, value = rng.choice((("+", a + b), ("-", a - b), ("*", a * b)))
        filler = " ".join(rng.choice(WORDS) for _ in range(rng.randrange(3, 12)))
        # The special tokens are added whole; the corpus holds what the template puts around them.
        yield (
            f"system\n{SYSTEM_PROMPT}\nuser\nWhat is {a} {op} {b}? {filler}\n"
            f"assistant\n<think>{filler}</think> Answer: {value}\n"
        )


def build_tokenizer(seed: int, vocab_size: int = 1024) -> object:
    """A ``PreTrainedTokenizerFast`` with TRL's Qwen2.5 chat template."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast
    from trl.chat_template_utils import qwen2_5_chat_template

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=_ascii_alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(corpus(seed), trainer=trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        chat_template=qwen2_5_chat_template,
        model_max_length=2048,
    )


def _ascii_alphabet() -> list[str]:
    """Printable ASCII, tab and newline in byte-level form. Not all 256 bytes: a lone byte of a
    multi-byte character decodes to U+FFFD, and vLLM's ``text_offset`` of such a token does not
    index its text; with whole characters only, every token of a random model decodes cleanly."""
    from tokenizers import pre_tokenizers

    wanted = {chr(code) for code in (9, 10, *range(32, 127))}
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    return sorted({piece for ch in wanted for piece, _ in byte_level.pre_tokenize_str(ch)})


def build(out_dir: Path, seed: int = 0, vocab_size: int = 1024) -> Path:
    """Write the tiny model and tokenizer to ``out_dir``; returns it."""
    import torch
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

    tokenizer = build_tokenizer(seed, vocab_size)
    ids = {token: tokenizer.convert_tokens_to_ids(token) for token in SPECIAL_TOKENS}  # type: ignore[attr-defined]
    config = LlamaConfig(
        vocab_size=len(tokenizer),  # type: ignore[arg-type]
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        head_dim=32,
        max_position_embeddings=2048,
        bos_token_id=ids["<|endoftext|>"],
        eos_token_id=ids["<|im_end|>"],
        pad_token_id=ids["<|endoftext|>"],
        tie_word_embeddings=False,
        dtype="float32",
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config)
    model.generation_config = GenerationConfig(
        eos_token_id=[ids["<|im_end|>"], ids["<|endoftext|>"]],
        pad_token_id=ids["<|endoftext|>"],
        bos_token_id=ids["<|endoftext|>"],
    )
    out_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)  # type: ignore[attr-defined]
    return out_dir


def build_adapter(model_dir: Path, out_dir: Path, rank: int = 8, seed: int = 0) -> Path:
    """A real PEFT LoRA adapter of the model in ``model_dir`` (attention projections, random B so
    it changes the outputs), as ``save_pretrained`` writes it; returns ``out_dir``."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    config = LoraConfig(
        r=rank,
        lora_alpha=2 * rank,
        target_modules=["q_proj", "k_proj", "v_proj", "o_proj"],
        init_lora_weights=False,
    )
    get_peft_model(model, config).save_pretrained(out_dir)
    return out_dir


def main(argv: Sequence[str] | None = None) -> int:
    parser = OneLineParser(
        prog="python -m trainer_entry.tiny_model", description=help_text(__doc__)
    )
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--vocab-size", type=int, default=1024)
    parser.add_argument("--adapter", type=Path, default=None, help="also write a LoRA adapter here")
    parser.add_argument("--adapter-rank", type=int, default=8)
    args = parser.parse_args(argv)
    print(build(args.out_dir, args.seed, args.vocab_size))
    if args.adapter is not None:
        print(build_adapter(args.out_dir, args.adapter, args.adapter_rank, args.seed))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
