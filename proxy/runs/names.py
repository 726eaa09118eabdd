"""A run's adapter names on the replicas, and the translation between them and TRL's.

Every TRL run names its adapters ``trl-policy-v1``, ``-v2``, ...: two runs on one replica would
collide at the first load. Under ``/runs/<run>/`` the proxy namespaces each name: the replicas
hold ``<run>.<name>`` (run names have no dot, so the first dot splits them; the result is one
plain path component, as a push requires), and each run sees its own names only.

The hot path is a generation request's ``model``: ``splice_model`` rewrites the bytes of its
value in place, found by one regex search outside the prompt's span (which the routing peek
located), so the body is not parsed again. A body where that search is ambiguous (a ``"model"``
key nested in another field, or the name written with JSON escapes) is rewritten through a full
parse instead (``canonical``: correct, slower, and rare).
"""

from __future__ import annotations

import re

import orjson

SEPARATOR = "."
RUN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,31}")  # no dot: the first one splits
_MODEL_KEY = rb'"model"\s*:\s*'


class BadRunName(ValueError):
    """A run name that is not 1-32 letters, digits, '_' or '-' (starting alnum)."""


def check_run_name(name: str) -> str:
    if RUN_NAME.fullmatch(name) is None:
        raise BadRunName(
            f"run name {name!r} must be 1-32 letters, digits, '_' or '-', starting with a "
            "letter or digit"
        )
    return name


def scoped(run: str, name: str) -> str:
    """The name the replicas hold for ``run``'s adapter ``name``."""
    return f"{run}{SEPARATOR}{name}"


def unscoped(run: str, name: str) -> str | None:
    """``run``'s own name for a replica-side ``name``; None if it is not ``run``'s."""
    prefix = run + SEPARATOR
    return name[len(prefix) :] if name.startswith(prefix) else None


def run_of(name: str) -> str | None:
    """The run a replica-side name belongs to (None: not a run's)."""
    run, sep, rest = name.partition(SEPARATOR)
    return run if sep and rest and RUN_NAME.fullmatch(run) else None


def splice_model(
    body: bytes, model: str, new: str, span: tuple[int, int]
) -> tuple[bytes, int, int] | None:
    """``body`` with its top-level ``model`` value ``model`` replaced by ``new``, the offset where
    the value stood and how many bytes longer the body became; None when the bytes alone do not
    say where it is (the caller rewrites through ``canonical``).

    ``span``: the prompt's value (``start``, ``end``), where no match may lie. Exactly one match
    outside it is spliced; none or several (a nested ``"model"`` key, an escaped spelling) are
    ambiguous."""
    old_value, new_value = orjson.dumps(model), orjson.dumps(new)
    pattern = re.compile(_MODEL_KEY + re.escape(old_value))
    start, end = span
    # Only the bytes around the prompt are searched (the prompt is most of a body).
    found = [*pattern.finditer(body, 0, start), *pattern.finditer(body, end)]
    if len(found) != 1:
        return None
    at = found[0].end() - len(old_value)
    spliced = body[:at] + new_value + body[found[0].end() :]
    return spliced, at, len(new_value) - len(old_value)


def canonical(body: bytes, new: str) -> bytes:
    """The slow path: parse, set ``model``, serialise (the caller's body was already valid)."""
    data = orjson.loads(body)
    data["model"] = new
    return orjson.dumps(data)


def unscope_text(text: bytes, run: str) -> bytes:
    """An answer's bytes with every ``<run>.`` name prefix removed: what an error echoes (vLLM's
    "The model `<run>.x` does not exist", a load's answer) reads with the run's own names. A
    path component stays as it is (a store's ``.../<run>.x/...`` is a real directory)."""
    prefix = re.escape((run + SEPARATOR).encode())
    return re.sub(rb"(?<![A-Za-z0-9._/-])" + prefix + rb"(?=[A-Za-z0-9])", b"", text)
