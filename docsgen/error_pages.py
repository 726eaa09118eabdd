"""The errors reference: what the proxy answers when it refuses a request, and every one-line
message the entry points print on purpose, found in their source.

- Answers: ``proxy.http.errors.ANSWERS``, the one table from a domain error to its answer, one
  row each: the HTTP status (or the one the error echoes), the ``reason`` it counts in
  ``rollout_proxy_rejections_total`` (the error's own, else the row's), whether the answer
  closes the connection, ``Retry-After`` or not, what it means (the error's docstring, and the
  operator's note) and what to do (the row's ``remedy``).
- Messages: the source of ``proxy``'s command line, settings and ``top``, ``replica_entry``'s
  launchers, ``trainer_entry`` and ``deploy`` (``SOURCES``) is parsed (``ast``, nothing
  imported) for the messages they raise or print for a user: ``parser.error(...)``,
  ``raise SomeError(...)`` with a message, ``print(..., file=sys.stderr)`` (or deploy's
  ``runtime.err``). An f-string's fields are shown as ``{...}`` with the expression that fills
  them, so the page can be searched for the fixed words of a message a user saw.
"""

from __future__ import annotations

import ast
import inspect
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from docsgen.cli_pages import cell, code

ROOT = Path(__file__).resolve().parents[1]
# The command lines' own modules (globs from the repository root): not the simulated replica's
# HTTP answers (vLLM's words) nor the proxy's request path (its answers are the table above).
SOURCES = {
    "rollout-proxy": ["proxy/cli.py", "proxy/config/*.py", "proxy/console/top.py"],
    "rollout-replica": ["replica_entry/*.py"],
    "rollout-trainer": ["trainer_entry/*.py"],
    "rollout-deploy": ["deploy/*.py", "deploy/rehearsal/*.py"],
}
_ERROR_WORDS = ("Error", "Refused", "Flags", "Missing", "Exit")
MIN_WORDS = 3  # a message of fewer fixed words is an internal one (a re-raise, a name)


def answers() -> str:
    """The proxy's error answers as a table, from ``ANSWERS``."""
    from proxy.http.errors import ANSWERS

    lines = [
        "| status | error | reason (rejections label) | closes the connection | Retry-After "
        "| what it means | what to do |",
        "|---|---|---|---|---|---|---|",
    ]
    for kind, answer in sorted(ANSWERS.items(), key=lambda item: item[1].status):
        doc = inspect.cleandoc(kind.__doc__ or "").split("\n\n")[0]
        meaning = doc + (f" The proxy logs it with: {answer.note}." if answer.note else "")
        reason = kind.reason or answer.reason
        label = code(reason) if reason else _instance_reason(kind)
        status = f"{answer.status} or the one it echoes" if answer.echoes else str(answer.status)
        closes = "yes" if answer.closes else "no"
        retry = "yes" if answer.retry else "no"
        where = f"`{kind.__module__}.{kind.__name__}`"
        lines.append(
            f"| {status} | {where} | {label} | {closes} | {retry} | {cell(meaning)} "
            f"| {cell(answer.remedy)} |"
        )
    return "\n".join(lines)


def _instance_reason(kind: type) -> str:
    """What a class without a reason of its own or its row's counts: the one each error is
    given (``self.reason``). A row that counts none fails the build."""
    if "self.reason" not in inspect.getsource(kind):
        raise ValueError(f"{kind.__name__} counts no reason: give it one, or its row in ANSWERS")
    return "the error's own"


def rejection_reasons() -> str:
    from proxy.metrics.labels import REJECTION_REASONS

    return ", ".join(code(reason) for reason in REJECTION_REASONS)


@dataclass(frozen=True)
class Message:
    path: str
    line: int
    text: str


def _text(node: ast.expr) -> str | None:
    """A message expression as text: literals as they are, f-string fields as ``{expr}``."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        parts = []
        for value in node.values:
            if isinstance(value, ast.Constant):
                parts.append(str(value.value))
            elif isinstance(value, ast.FormattedValue):
                parts.append("{" + ast.unparse(value.value) + "}")
        return "".join(parts)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _text(node.left), _text(node.right)
        if left is None and right is None:
            return None
        return (left if left is not None else "{...}") + (right if right is not None else "{...}")
    return None


def _fixed_words(text: str) -> int:
    outside = []
    depth = 0
    for char in text:
        depth += char == "{"
        if depth == 0:
            outside.append(char)
        depth -= char == "}" and depth > 0
    return len("".join(outside).split())


def _is_stderr(call: ast.Call) -> bool:
    for keyword in call.keywords:
        if keyword.arg == "file":
            target = ast.unparse(keyword.value)
            return target.endswith("stderr") or target.endswith(".err")
    return False


def _messages_in(tree: ast.AST) -> Iterator[tuple[int, ast.expr]]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call):
            name = ast.unparse(node.exc.func).split(".")[-1]
            if name.endswith(_ERROR_WORDS) and node.exc.args:
                yield node.lineno, node.exc.args[0]
        elif isinstance(node, ast.Call) and node.args:
            func = ast.unparse(node.func)
            if func.endswith("parser.error") or (func == "print" and _is_stderr(node)):
                yield node.lineno, node.args[0]


def messages(program: str) -> list[Message]:
    """The messages of ``program``'s sources, file by file, in source order."""
    found = []
    for pattern in SOURCES[program]:
        for path in sorted(ROOT.glob(pattern)):
            tree = ast.parse(path.read_text(), str(path))
            for line, node in sorted(_messages_in(tree), key=lambda pair: pair[0]):
                text = _text(node)
                if text is not None and _fixed_words(text) >= MIN_WORDS:
                    found.append(Message(str(path.relative_to(ROOT)), line, text.strip()))
    return found


def render() -> str:
    parts = [
        "# Errors and messages\n",
        "What the proxy answers when it refuses a request, and every one-line message the "
        "entry points print for you on purpose. Search this page (or the site) for the fixed "
        "words of a message you saw; [Troubleshooting](../troubleshooting.md) says what to do "
        "about the common ones.\n",
        "!!! note\n    Generated from the code when the site is built "
        "(`docsgen/error_pages.py`): the proxy's answer table, and the messages found in the "
        "source by their shape (`parser.error(...)`, `raise ...Error(...)`, a print to "
        "stderr). `{...}` marks what the message fills in.\n",
        "## The proxy's answers\n",
        "Every error answer the proxy makes itself (a replica's own answer passed on is not "
        "one) comes from this one table. It has vLLM's error shape, "
        '`{"error": {"message": ..., "type": ..., "param": ..., "code": STATUS}}` (an answer '
        "about several replicas adds each one's outcome under `replicas`), and counts one in "
        "`rollout_proxy_rejections_total{reason}`, whose reasons are: "
        f"{rejection_reasons()}. An answer that closes the connection leaves the request's "
        "body unread; send the next request on a new connection.\n",
        answers() + "\n",
    ]
    for program in SOURCES:
        parts.append(f"## {program}\n")
        parts.append("| message | where |\n|---|---|")
        for message in messages(program):
            parts.append(f"| {code(message.text)} | `{message.path}:{message.line}` |")
        parts.append("")
    return "\n".join(parts)
