"""Claims the documentation makes that no command it shows can check, held to one source each.

- How long a command takes, and what it fills (``TIMINGS``): one figure per thing, said the same
  wherever it is said (a page, a code comment, the Makefile's comment on a target, a module's
  docstring). A figure measured on a busy machine and on a quiet one is given as a range, or
  with the machine; the figure found is the first duration (or size) after the thing's name in
  its statement (a line of a code block, a table row, a sentence; in the Makefile, a target's
  comment).
- The CPU recipe (``trainer_entry.recipe.CPU_SIZES``): a statement about the sizes the trainer
  takes "without CUDA" names the recipe's own figures, and one that says the defaults are the
  GPU recipe says what happens without CUDA too (the README once said the defaults were the GPU
  recipe for a CPU run, which takes the CPU sizes already).
- Repository paths a page or an example names exist in a checkout (``examples/proxy.toml`` once
  pointed at a page that exists only in the built site).
- An install command names what can be installed: rollout-proxy is not published on PyPI, so
  never ``pip install rollout-proxy[...]`` (every program's hint says ``pip install -e '.[X]'``).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tests.support.docs import _FENCE, ROOT, blocks

_NUMBER = r"\d+(?:\.\d+)?"
DURATION = re.compile(
    rf"(?:about |~)?(?:{_NUMBER}(?:-{_NUMBER})? ?|a |a few )"
    rf"(?:s|ms|seconds?|min|minutes?|h|hours?)\b(?: to {_NUMBER} (?:s|minutes?))?"
)
SIZE = re.compile(rf"(?:about |~)?{_NUMBER} ?(?:MB|GB)\b")


@dataclass(frozen=True)
class Timing:
    """What a thing takes (``kind``: a duration or a size), found within ``within`` characters
    after ``name`` in a statement."""

    name: str  # a regular expression
    kind: re.Pattern[str]
    figure: str  # as ``normalized`` writes it
    within: int = 200


TIMINGS = (
    Timing(r"\bmake venv\b", DURATION, "about a minute"),
    Timing(r"\bmake e2e-venv\b", DURATION, "2.5-8 minutes"),  # 149 s local wheels, 486 s PyPI
    Timing(r"\bmake e2e-venv\b", SIZE, "3.0 GB"),
    Timing(r"\bmake docs\b", DURATION, "about 3 s"),
    Timing(r"\bmake hub-floor\b", DURATION, "25-45 s"),  # 41 s and 43 s measured, busy
    Timing(r"\bmake test-tools\b", DURATION, "about a minute"),
    Timing(r"\bmake demo\b", DURATION, "about 20 s"),
    Timing(r"\bmake test\b(?!-)", DURATION, "18-22 minutes"),  # 1115 s, 1284 s: 2026-12-07
    Timing(r"\btrainer_entry\.tiny_model\b", DURATION, "6-17 s", 80),  # 5.7 s, 16.5 s measured
    Timing(r"\b[Tt]he tiny run takes\b", DURATION, "45 s to 3.5 minutes"),  # 73 s, 211 s measured
    Timing(r"\b[Tt]he rehearsal takes\b", DURATION, "3-5 minutes"),  # 295 s measured
    Timing(r"-m benchmarks learn\b", DURATION, "about 5 minutes"),
)


def normalized(figure: str) -> str:
    """``~20 s`` -> ``about 20 s``, ``5 min`` -> ``5 minutes``, ``2 seconds`` -> ``2 s``."""
    text = re.sub(r"^~\s*", "about ", figure.strip())
    text = re.sub(r"(\d)(s|ms|min|minutes?|h|GB|MB)\b", r"\1 \2", text)
    text = re.sub(r"(\d) min\b", r"\1 minutes", text)
    return re.sub(r"(\d) seconds?\b", r"\1 s", text)


def statements(path: Path) -> Iterator[str]:
    """The statements of a file, each on one line: a code block's lines (split at ``&&``),
    table rows, the sentences of its paragraphs; the Makefile's comment on each target, as
    ``make TARGET: COMMENT``; a Python module's docstring, as paragraphs."""
    if path.name == "Makefile":
        yield from _makefile(path.read_text())
        return
    text = path.read_text()
    if path.suffix == ".py":
        text = text.split('"""')[1]
    else:
        for block in blocks(path):
            for line in block.body.splitlines():
                yield from (part.strip() for part in line.split("&&"))
        text = _FENCE.sub("", text)
    text = re.sub(r"<!--.*?-->", "", text, flags=re.S)
    for item in re.split(r"\n\s*\n|\n(?=\s*(?:[-*|]|\d+\.) )", text):  # paragraphs, items, rows
        yield from re.split(r"\.\s+(?=[A-Z`\[(])", " ".join(item.split()))


def _makefile(text: str) -> Iterator[str]:
    """Each target's comment: the comment lines above it (variables between them skipped)."""
    comment: list[str] = []
    for line in text.splitlines():
        if line.startswith("#"):
            comment.append(line.lstrip("# "))
            continue
        if re.match(r"^\w+\s*[:?]?=", line):
            continue
        target = re.match(r"^([\w-]+):", line)
        if target and comment:
            yield f"make {target[1]}: " + " ".join(" ".join(comment).split())
        comment = []


def timing_problems(path: Path) -> list[str]:
    """Each figure of ``TIMINGS`` the file gives otherwise."""
    problems = []
    for statement in statements(path):
        for timing in TIMINGS:
            for found in re.finditer(timing.name, statement):
                figure = _figure(timing, statement, found.end())
                if figure is not None and normalized(figure.group()) != timing.figure:
                    problems.append(
                        f"{found.group()!r}: {timing.figure} wherever it is said, not "
                        f"{figure.group()!r} ({statement[:90]}...)"
                    )
    return problems


def timings_found(paths: list[Path]) -> set[tuple[str, str]]:
    """(name, figure) of each of ``TIMINGS`` that some statement of ``paths`` gives."""
    found = set()
    for statement in (s for path in paths for s in statements(path)):
        for timing in TIMINGS:
            for name in re.finditer(timing.name, statement):
                figure = _figure(timing, statement, name.end())
                if figure is not None and normalized(figure.group()) == timing.figure:
                    found.add((timing.name, timing.figure))
    return found


def _figure(timing: Timing, statement: str, start: int) -> re.Match[str] | None:
    return timing.kind.search(statement[: start + timing.within], start)


_CPU_FLAGS = {
    "token_budget": [r"--token-budget (\d+)", r"micro-batch of (\d+) tokens"],
    "gradient_accumulation_steps": [r"--gradient-accumulation-steps (\d+)"],
    "max_completion_length": [r"--max-completion-length (\d+)", r"completions up to (\d+)"],
}


def cpu_recipe_problems(path: Path, sizes: dict[str, int]) -> list[str]:
    """Statements about the trainer without CUDA whose figures are not the CPU recipe's."""
    problems = []
    for statement in statements(path):
        said = re.search(r"without CUDA", statement, re.I)
        if re.search(r"defaults are the GPU", statement) and said is None:
            problems.append(f"the GPU recipe's defaults, said of every machine: {statement}")
        if said is None:
            continue
        after = re.split(r"[|;]", statement[said.end() :])[0]  # its clause, its table cell
        for size, patterns in _CPU_FLAGS.items():
            for pattern in patterns:
                for found in re.finditer(pattern, after):
                    if int(found[1]) != sizes[size]:
                        problems.append(f"without CUDA {size} is {sizes[size]}, not {found[1]}")
    return problems


_PATH = re.compile(
    r"(?<![\w/.$<{:-])((?:docs|examples|benchmarks|deploy|proxy|tests|trainer_entry|"
    r"replica_entry|adapter_receiver|monitoring|docsgen)/[\w./-]*\.(?:py|md|toml|json|ya?ml|png))\b"
)


def missing_paths(path: Path) -> list[str]:
    """Repository paths the file names (outside its code blocks) that a checkout lacks; a page's
    own relative links count too (``proxy/runs.md`` from ``docs/``)."""
    text = _FENCE.sub("", path.read_text())
    named = {found[1] for found in _PATH.finditer(text)}
    return sorted(p for p in named if not ((ROOT / p).exists() or (path.parent / p).exists()))


_NOT_PUBLISHED = re.compile(r"pip install\s+['\"]?rollout-proxy\b")


def unpublished_installs(text: str) -> list[str]:
    """``pip install rollout-proxy...`` lines: a name PyPI does not have."""
    return [line.strip() for line in text.splitlines() if _NOT_PUBLISHED.search(line)]
