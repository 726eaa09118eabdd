"""What an entry point checks before it starts a server it would otherwise see fail a minute later
(vLLM loads the model first, then binds its port and claims its adapter store): each check
returns one line that says what is wrong and what to do, or None. Standard library only, nothing
started, nothing created.

- ``listen_problem``: ``host:port`` cannot be bound now (taken, not an address of this machine,
  a name that does not resolve). A port free now may be taken before the server binds it: the
  server's own error still stands behind this check.
- ``store_problem``: the adapter receiver's store would be refused (``adapter_receiver.store``).
- ``model_problem``: a model named by a path that is not there, and not a Hub id either
  (``ORG/NAME`` or ``NAME``: letters, digits, ``-``, ``_``, ``.``), so that neither a local
  load nor a download could find it.

(A directory to write into is checked by ``proxy.config.paths.directory_problem``.)
"""

from __future__ import annotations

import re
import socket
from pathlib import Path

from adapter_receiver.store import claimable, refusal
from proxy.http.listen import cannot_listen

# huggingface_hub's repo id rule (``validate_repo_id``): an optional namespace, a name of
# letters, digits, "-", "_" and "."; no "--" or ".." and no leading or trailing "-" or ".".
_HUB_ID = re.compile(r"(?:[A-Za-z0-9][\w.-]{0,94}/)?[A-Za-z0-9][\w.-]{0,95}")


def is_hub_id(value: str) -> bool:
    """Whether ``value`` can name a Hub repository (it may still not exist)."""
    if not _HUB_ID.fullmatch(value) or "--" in value or ".." in value:
        return False
    return not any(part.endswith(("-", ".")) for part in value.split("/"))


def listen_problem(host: str, port: int, server: str) -> str | None:
    """Why ``host:port`` cannot be listened on now (``server``: what may hold it), or None."""
    try:
        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the server binds
            probe.bind((host, port))
    except OSError as exc:
        return str(cannot_listen(host, port, exc, server=server))
    return None


def store_problem(path: str | None) -> str | None:
    """Why the adapter store at ``path`` would be refused (None: not named, or fine)."""
    if path is None:
        return None
    why = claimable(Path(path))
    return None if why is None else str(refusal(why))


def model_problem(flag: str, model: str) -> str | None:
    """Why ``model`` can be neither a local model directory nor a Hub id, or None."""
    local = Path(model).expanduser()
    if local.is_dir():
        if not (local / "config.json").is_file():
            return f"{flag} {model}: a directory without config.json, not a model's"
        return None
    if local.is_file() and local.suffix == ".gguf":  # vLLM loads a GGUF file
        return None
    if local.exists():
        return f"{flag} {model}: a file; name the model's directory or a Hub id (ORG/NAME)"
    if is_hub_id(model):
        return None
    return f"{flag} {model}: no such directory here, and not a Hub id (ORG/NAME) either"
