"""The adapter upload format: what a pusher sends and a receiver accepts. Standard library only
(a vLLM replica imports it inside its own API server).

Routes, under ``PREFIX`` (a prefix of ours: vLLM has no route there):

- ``PUT /rollout/adapters/{name}``: one adapter version, streamed. ``Content-Length`` is required
  and exact. The body is the manifest line, then each file of the manifest in its order: its
  ``size`` bytes, then its sha256 as 64 lowercase hex characters. The digest follows the bytes so
  that a pusher reads each file once, hashing as it sends.
- ``GET /rollout/adapters``: the store (entries, bytes used, the caps): also how a pusher learns
  that a replica has a receiver (200) or not (404).

The manifest line is a JSON object and ``\\n``, at most ``MANIFEST_LIMIT`` bytes::

    {"format": 1, "files": [{"name": "adapter_config.json", "size": 611}, ...],
     "origin": "/lora/run/.vllm_lora/trl-policy-v7"}

``origin`` (optional) is where the bucket mount shows the same version: a proxy that received the
upload loads it there on replicas that cannot take a push. Names of adapters and of files are one
path component each (``NAME_RULE``, ``safe_name``: ``[A-Za-z0-9][A-Za-z0-9._-]{0,127}`` without
``..``: no separator, no leading dot, so never ``.`` or ``..``, and nothing that reads like a
path segment); at most ``MAX_FILES`` files, no name twice. The proxy holds every adapter name
that arrives from outside to the same rule (TRL's loads and unloads, the receiver's uploads), so
a name it accepts is one a replica's receiver takes too.

A published entry is identified by its content digest (``content_digest``): the sha256 of its
sorted (file name, size, sha256) list, so two uploads of the same bytes land on one entry.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass

from adapter_receiver import reference

PREFIX = "/rollout/adapters"
CONTENT_TYPE = "application/x-rollout-adapter"
FORMAT = 1
MANIFEST_LIMIT = 64 * 1024
MAX_FILES = 64
DIGEST_CHARS = 64
ORIGIN_LIMIT = 4096
_SAFE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
_HEX = re.compile(rb"[0-9a-f]{64}")


class UploadError(Exception):
    """An upload the receiver refuses: ``status`` and a message for the sender."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


# What an adapter is made of, and so all a pusher sends: PEFT's config and weights (safetensors
# or the older .bin), the tokenizer files PEFT may save beside them, and the served-policy probe
# the trainer computed under the same weights (``PROBE_FILE``, ``adapter_receiver.reference``:
# the proxy checks each replica's answer against it; vLLM ignores it). Anything else in the folder
# (a README, a stray key file) stays where it is.
PROBE_FILE = reference.FILE
ADAPTER_FILES = frozenset(
    {
        PROBE_FILE,
        "adapter_config.json",
        "adapter_model.safetensors",
        "adapter_model.bin",
        "tokenizer.json",
        "tokenizer_config.json",
        "tokenizer.model",
        "special_tokens_map.json",
        "added_tokens.json",
        "vocab.json",
        "merges.txt",
        "chat_template.jinja",
    }
)


def adapter_file(name: str) -> bool:
    """Whether a file of an adapter folder is part of the adapter (``ADAPTER_FILES``)."""
    return name in ADAPTER_FILES


def shown(name: str) -> str:
    """A client-given name as a log line may carry it: itself when printable, else its ``repr``
    (a CR/LF in a name would otherwise forge a log line)."""
    return name if name.isprintable() else repr(name)


NAME_RULE = (
    "one path component: 1 to 128 letters, digits, '.', '_' or '-', starting with a letter or "
    "digit, with no '..'"
)


def safe_name(name: str) -> bool:
    """True for one plain path component (``NAME_RULE``; see the module docstring)."""
    return _SAFE.fullmatch(name) is not None and ".." not in name


@dataclass(frozen=True, slots=True)
class FileSpec:
    name: str
    size: int


@dataclass(frozen=True, slots=True)
class Manifest:
    files: tuple[FileSpec, ...]
    origin: str | None = None

    @property
    def total(self) -> int:
        return sum(f.size for f in self.files)

    def body_length(self, line: bytes) -> int:
        """The exact body length of an upload that starts with ``line`` (this manifest's)."""
        return len(line) + sum(f.size + DIGEST_CHARS for f in self.files)

    def encode(self) -> bytes:
        payload: dict[str, object] = {
            "format": FORMAT,
            "files": [{"name": f.name, "size": f.size} for f in self.files],
        }
        if self.origin is not None:
            payload["origin"] = self.origin
        return json.dumps(payload, separators=(",", ":")).encode() + b"\n"


def parse_manifest(line: bytes) -> Manifest:
    """The manifest in ``line`` (without its newline); ``UploadError`` (400) if it is not one."""
    try:
        data = json.loads(line)
    except (ValueError, UnicodeDecodeError):
        raise UploadError(400, "the manifest line is not JSON") from None
    except RecursionError:  # ``[`` x 60,000 fits the line limit and nests past the stack
        raise UploadError(400, "the manifest line nests too deeply to be a manifest") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise UploadError(400, f"the manifest must be an object with format {FORMAT}")
    files, origin = data.get("files"), data.get("origin")
    if not isinstance(files, list) or not files or len(files) > MAX_FILES:
        raise UploadError(400, f"the manifest needs 1 to {MAX_FILES} files")
    specs: list[FileSpec] = []
    for item in files:
        name = item.get("name") if isinstance(item, dict) else None
        size = item.get("size") if isinstance(item, dict) else None
        if not isinstance(name, str) or not safe_name(name):
            raise UploadError(400, f"unsafe or missing file name {str(name)[:80]!r}")
        if not isinstance(size, int) or isinstance(size, bool) or size < 0:
            raise UploadError(400, f"file {name}: size must be a non-negative integer")
        specs.append(FileSpec(name, size))
    if len({s.name for s in specs}) != len(specs):
        raise UploadError(400, "a file name appears twice in the manifest")
    if origin is not None and (
        not isinstance(origin, str) or len(origin) > ORIGIN_LIMIT or not origin.isprintable()
    ):
        raise UploadError(400, f"origin must be printable text of at most {ORIGIN_LIMIT} chars")
    return Manifest(tuple(specs), origin)


def check_digest(name: str, given: bytes, actual: str) -> None:
    """Raise ``UploadError`` (400) unless ``given`` is the hex sha256 ``actual``."""
    if _HEX.fullmatch(given) is None:
        raise UploadError(400, f"file {name}: the 64 hex digits of its sha256 must follow it")
    if given.decode() != actual:
        raise UploadError(400, f"file {name}: sha256 mismatch (the bytes were damaged)")


def content_digest(files: Sequence[tuple[str, int, str]]) -> str:
    """sha256 (hex) of an entry's (file name, size, sha256) list, in name order."""
    hasher = hashlib.sha256()
    for name, size, digest in sorted(files):
        hasher.update(f"{name}\0{size}\0{digest}\n".encode())
    return hasher.hexdigest()


def error_body(status: int, message: str) -> dict[str, object]:
    """vLLM's error shape, as the receiver answers."""
    return {"error": {"message": message, "type": _TYPES.get(status, "Error"), "param": None,
                      "code": status}}  # fmt: skip


_TYPES = {
    400: "BadRequestError",
    401: "AuthenticationError",
    404: "NotFoundError",
    405: "MethodNotAllowed",
    408: "RequestTimeout",
    411: "LengthRequired",
    413: "RequestEntityTooLarge",
    500: "InternalServerError",
    503: "ServiceUnavailable",
    507: "InsufficientStorage",
}
