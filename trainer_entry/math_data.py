"""A generated arithmetic dataset in TRL's conversational prompt format (no download).

``python -m trainer_entry.math_data OUT.jsonl --rows 64 --seed 0`` writes one JSON object per
line: ``{"prompt": [{"role": "system", ...}, {"role": "user", ...}], "answer": "82"}``. The
system prompt is shared by every row (the chat template's shared prefix, as in real GRPO runs)
and long enough that a prompt spans more than one 32-token KV block, so a replica's prefix
cache has whole blocks to hit on the rollouts of a group.
"""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from proxy.config.programs import OneLineParser, help_text
from trainer_entry.prompts import THINK_ANSWER

SYSTEM = f"You are a careful assistant who solves arithmetic problems. {THINK_ANSWER}"


def rows(count: int, seed: int) -> list[dict[str, Any]]:
    """``count`` problems drawn from ``random.Random(seed)``."""
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        a, b = rng.randrange(100), rng.randrange(100)
        op, value = rng.choice((("+", a + b), ("-", a - b), ("*", a * b)))
        question = f"What is {a} {op} {b}?"
        prompt = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": question}]
        out.append({"prompt": prompt, "answer": str(value)})
    return out


def write_jsonl(path: Path, count: int, seed: int = 0) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(row) + "\n" for row in rows(count, seed)))
    return path


def main(argv: Sequence[str] | None = None) -> int:
    parser = OneLineParser(prog="python -m trainer_entry.math_data", description=help_text(__doc__))
    parser.add_argument("out", type=Path)
    parser.add_argument("--rows", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    print(write_jsonl(args.out, args.rows, args.seed))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
