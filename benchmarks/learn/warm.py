"""The learning benchmark's model: the tiny model (``trainer_entry.tiny_model``), then a short
supervised warm-up on the task's corpus (``task.conversations``) so that GRPO starts from a model
whose answers already look like the task's and differ in reward (``task``'s docstring says why).

Each conversation is rendered as TRL's rollout worker renders a prompt (the chat template, the
generation prompt) and the reply appended; the loss is on the reply's tokens (its end-of-turn
token included, so completions end). Plain torch on CPU: AdamW, a fixed number of steps, a
fixed seed; a few seconds. Imports torch and transformers (the heavy tier).
"""

from __future__ import annotations

import hashlib
import logging
import random
import time
from pathlib import Path
from typing import Any

from benchmarks.learn.task import conversations
from trainer_entry.prompts import conversation

log = logging.getLogger("benchmarks.learn")

STEPS = 600
BATCH = 32
LEARNING_RATE = 1e-2
CORPUS = 4000


def _example(tokenizer: Any, messages: list[dict[str, str]]) -> tuple[list[int], int]:
    """(token ids, where the reply starts) of one conversation, rendered as TRL renders it."""
    asked = conversation(messages[0]["content"], None, "")
    prefix = tokenizer.apply_chat_template(asked, add_generation_prompt=True, return_dict=False)
    full = tokenizer.apply_chat_template([*asked, messages[1]], return_dict=False)
    assert full[: len(prefix)] == prefix, "the chat template renders the prompt differently"
    return list(full), len(prefix)


def warm_up(out_dir: Path, seed: int = 0, steps: int = STEPS) -> Path:
    """Build the tiny model into ``out_dir`` and train it on the task's corpus; returns it.
    Reused when ``out_dir`` already holds one (``warm.json`` names its seed and steps)."""
    import json

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from trainer_entry.tiny_model import build

    stamp = out_dir / "warm.json"
    sample = json.dumps(list(conversations(seed, 64))).encode()  # the corpus changed: train again
    wanted = {"seed": seed, "steps": steps, "batch": BATCH, "lr": LEARNING_RATE,
              "corpus": hashlib.sha256(sample).hexdigest()[:16]}  # fmt: skip
    if stamp.exists() and json.loads(stamp.read_text()) == wanted:
        return out_dir
    started = time.monotonic()
    build(out_dir, seed)
    tokenizer = AutoTokenizer.from_pretrained(out_dir)
    model = AutoModelForCausalLM.from_pretrained(out_dir, dtype=torch.float32)
    examples = [_example(tokenizer, c) for c in conversations(seed, CORPUS)]
    pad = tokenizer.pad_token_id
    torch.manual_seed(seed)
    rng = random.Random(seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=LEARNING_RATE)
    model.train()
    for step in range(1, steps + 1):
        batch = rng.sample(examples, BATCH)
        width = max(len(ids) for ids, _ in batch)
        inputs = torch.full((BATCH, width), pad)
        labels = torch.full((BATCH, width), -100)
        mask = torch.zeros((BATCH, width), dtype=torch.long)
        for row, (ids, start) in enumerate(batch):
            inputs[row, : len(ids)] = torch.tensor(ids)
            labels[row, start : len(ids)] = torch.tensor(ids[start:])
            mask[row, : len(ids)] = 1
        loss = model(input_ids=inputs, attention_mask=mask, labels=labels).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % 50 == 0 or step == steps:
            log.info("warm-up step %d/%d: loss %.3f", step, steps, loss.item())
    model.save_pretrained(out_dir)
    stamp.write_text(json.dumps(wanted))
    log.info("warm model in %s (%.0f s)", out_dir, time.monotonic() - started)
    return out_dir
