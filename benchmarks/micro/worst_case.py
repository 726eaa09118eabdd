"""The most event-loop time one request can cost in the body reader and the key builder.

Hostile or absurd request shapes (a batch of a million one-token prompts, deep nesting, a
32 MiB string full of escaped quotes, a decoy ``"prompt"`` forcing the full parse, ...) are
read and keyed exactly as on the request path; each is timed (best of a few runs, so the figure
is the work, not the machine's noise) and reported with what the proxy does with it (routed or
refused with 400). Nothing here may cost more than a few milliseconds.

    python -m benchmarks.micro.worst_case
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from proxy.routing.cost import CostModel
from proxy.routing.facts import Facts
from proxy.routing.peek import DEFAULT_MAX_ELEMENTS, BadBody
from proxy.routing.prefix import PrefixPolicy

MIB = 1024 * 1024
RUNS = 3


def _body(prompt: bytes, extra: bytes = b"") -> bytes:
    return b'{"model": "m", "prompt": ' + prompt + b', "max_tokens": 1' + extra + b"}"


def shapes() -> dict[str, Callable[[], bytes]]:
    """Name -> body builder (built lazily: some are tens of MiB)."""
    tokens = b", ".join(b"%d" % (i % 50_000) for i in range(6 * MIB // 7))
    return {
        "flat tokens, 32 MiB": lambda: _body(b"[" + (tokens + b", ") * 5 + b"1]"),
        "text, 32 MiB": lambda: _body(b'"' + b"a" * (32 * MIB) + b'"'),
        "text of escaped quotes, 8 MiB": lambda: _body(b'"' + b'\\"' * (4 * MIB) + b'"'),
        "batch of 1M one-token prompts, 4 MiB": lambda: _body(
            b"[" + b",".join([b"[1]"] * 1_000_000) + b"]"
        ),
        "batch of 1M one-word prompts, 6 MiB": lambda: _body(
            b"[" + b",".join([b'"a"'] * 1_000_000) + b"]"
        ),
        "nested 100k deep beside the prompt": lambda: _body(
            b"[1]", b', "x": ' + b"[" * 100_000 + b"]" * 100_000
        ),
        "1M-element field beside the prompt": lambda: _body(
            b"[1]", b', "x": [' + b",".join([b"[1]"] * 1_000_000) + b"]"
        ),
        "decoy prompt key forcing the full parse": lambda: (
            b'{"x": {"prompt": 1}, "model": "m", "prompt": ['
            + b",".join([b"[1]"] * 1_000_000)
            + b"]}"
        ),
        "batch of 4k prompts of 2k tokens (allowed)": lambda: _body(
            b"[" + b",".join([b"[" + b", ".join([b"7"] * 2000) + b"]"] * 4_000) + b"]"
        ),
        "chat of 1,300 messages (allowed)": lambda: (
            b'{"model": "m", "messages": ['
            + b",".join([b'{"role": "user", "content": "' + b"w " * 200 + b'"}'] * 1_300)
            + b"]}"
        ),
        "batch of 4k prompts of 2k-byte texts (allowed)": lambda: _body(
            b"[" + b",".join([b'"' + b"a" * 2000 + b'"'] * 4_000) + b"]"
        ),
    }


def measure(build: Callable[[], bytes], policy: PrefixPolicy) -> dict[str, Any]:
    body = build()
    facts = Facts(policy, CostModel(), DEFAULT_MAX_ELEMENTS)
    best, outcome = float("inf"), ""
    for _ in range(RUNS):
        started = time.perf_counter()
        try:
            key = b"messages" if body.startswith(b'{"model": "m", "messages"') else b"prompt"
            route = facts.build(body, key)  # the proxy's own path (routing.facts)
            outcome = f"routed ({len(route.keys)} keys)"
        except BadBody as exc:
            outcome = f"400: {str(exc)[:48]}..."
        best = min(best, time.perf_counter() - started)
    return {"bytes": len(body), "ms": best * 1e3, "outcome": outcome}


def run() -> list[dict[str, Any]]:
    policy = PrefixPolicy()
    return [{"shape": name, **measure(build, policy)} for name, build in shapes().items()]


def main() -> int:
    rows = run()
    print(f"{'shape':<45} {'MiB':>6} {'ms':>8}  outcome")
    for row in rows:
        print(f"{row['shape']:<45} {row['bytes'] / MIB:>6.1f} {row['ms']:>8.2f}  {row['outcome']}")
    print(f"worst: {max(r['ms'] for r in rows):.2f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
