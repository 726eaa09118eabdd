"""The ``ab`` suite's flags, in a group of ``python -m benchmarks``'s parser (standard library and
``targets`` only: the parser is built before any suite's imports)."""

from __future__ import annotations

import argparse

from benchmarks.suites.ab.targets import parse_target
from proxy.config.units import DurationArg


def positive_int(text: str) -> int:
    """A whole number above 0 (``--rounds``, ``--concurrency``, ``--chunks``)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"a whole number, not {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"at least 1, not {text!r}")
    return value


def token_sizes(text: str) -> tuple[int, ...]:
    """``--tokens``: prompt sizes, comma-separated (``600,3000``), in the order given."""
    sizes = tuple(positive_int(part.strip()) for part in text.split(",") if part.strip())
    if not sizes:
        raise argparse.ArgumentTypeError(f"one prompt size or more (600,3000), not {text!r}")
    return sizes


def add_flags(parser: argparse.ArgumentParser) -> None:
    """The ``ab`` group: which two sides, the load, the rounds."""
    group = parser.add_argument_group(
        "ab",
        "A and B up at once in front of the same fast replicas, the load alternated between them\n"
        "in rounds; a round's ratio is B's CPU per request over A's (python -m benchmarks ab)",
    )
    add = group.add_argument
    add(
        "--a",
        type=parse_target,
        default="passthrough",
        metavar="TARGET",
        help="ab: side A, the baseline: proxy (this checkout), passthrough (the bare aiohttp "
        "forwarder) or proxy@REV (the proxy at git revision REV)",
    )
    add(
        "--b",
        type=parse_target,
        default="proxy",
        metavar="TARGET",
        help="ab: side B, measured against A: proxy, passthrough or proxy@REV",
    )
    add(
        "--rounds",
        type=positive_int,
        metavar="N",
        help="ab: rounds per prompt size (default: 8, 4 with --quick)",
    )
    add(
        "--concurrency",
        type=positive_int,
        default=64,
        metavar="N",
        help="ab: requests in flight, from two load-generator processes",
    )
    add(
        "--tokens",
        type=token_sizes,
        default="600,3000",
        metavar="SIZES",
        help="ab: prompt sizes in tokens, comma-separated, each with its own rounds",
    )
    add(
        "--stream",
        action="store_true",
        help="ab: streamed completions of --chunks events, return_token_ids in each request",
    )
    add(
        "--chunks",
        type=positive_int,
        default=40,
        metavar="N",
        help="ab: events (tokens) of each streamed answer, with --stream",
    )
    add(
        "--order",
        choices=("abba", "abab"),
        default="abba",
        help="ab: abba runs A first in odd rounds and B first in even ones; abab always A first",
    )
    add(
        "--replica-delay",
        type=DurationArg(),
        default=0.0,
        help="ab: the fast replicas' wait before each answer",
    )
    add(
        "--run-timeout",
        type=DurationArg(positive=True),
        default=300.0,
        help="ab: the longest one side's run of a round may take before the A/B stops",
    )
