"""What the trainer checks before it starts anything: the launcher's first step, before torch,
TRL or PEFT are imported (so it runs in seconds, and without them). Each failure is one line that
names the flag and what to do (``BadInput``; the command exits 2).

Local inputs, nothing made or changed:
- ``--model``: a local model directory (with ``config.json``), else a Hub id (``ORG/NAME``):
  a path that is not there and cannot be a Hub id fails here, not after the ranks started
  (``replica_entry.startup.model_problem``);
- ``--dataset``: a name ending ``.jsonl``/``.json``/``.parquet`` is a file the trainer reads
  itself (``LOCAL_SUFFIXES``; ``trainer_entry.train.load_prompts``), so it must be one here,
  with the columns the run reads (``columns_problem``: ``--prompt-column``, and
  ``--answer-column`` for a reward that grades answers; a JSON-lines file's first row, a
  Parquet file's schema), which ``load_prompts`` would otherwise find a minute later, with the
  proxy started and TRL imported; anything else a local file or directory, or a Hub dataset id;
- ``--output-dir``, ``--adapters-local``: directories, or paths where one can be made (the
  nearest part that exists is a writable directory);
- ``--response-template``: a family, or a JSON file that is here;
- ``--sidecar-port`` (when given) free on ``--sidecar-host``.

Then each Hub id (model, dataset) is looked up on the Hub once (``HUB_LOOKUP``: one GET, at most
8 s an id, no retries: ``model_info``/``dataset_info``): not found, or gated, is said at
once; no answer at all (DNS, a refused connection, a timeout) is the network, said in one line,
unless every Hub id is in this machine's Hub cache: then the run goes on from the cache, with
``HF_HUB_OFFLINE=1`` for the ranks (the libraries would otherwise spend minutes retrying before
they fall back to it). With ``HF_HUB_OFFLINE`` set already, nothing is looked up: an id must be
in the cache.
"""

from __future__ import annotations

import importlib.util
import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from proxy.config.paths import directory_problem
from replica_entry.startup import is_hub_id, listen_problem, model_problem
from trainer_entry.options import TrainerOptions
from trainer_entry.templates import FAMILIES

if TYPE_CHECKING:
    from huggingface_hub import HfApi

log = logging.getLogger("trainer_entry")

LOCAL_SUFFIXES = (".jsonl", ".json", ".parquet")  # datasets the trainer reads itself
GRADED = frozenset({"math", "boxed"})  # the rewards that read the answer column
OFFLINE_ENV = "HF_HUB_OFFLINE"


class BadInput(ValueError):
    """An input the run cannot use; the message names the flag and what to do."""


@dataclass(frozen=True, slots=True)
class HubLookup:
    """How long the Hub may take to answer whether a repository exists (one try: a network that
    failed once in the few seconds before a run is as good as down for its start)."""

    timeout_s: float = 8.0


HUB_LOOKUP = HubLookup()


def check_local(options: TrainerOptions) -> None:
    """``BadInput`` for the first local input that cannot work (module docstring)."""
    problem = (
        model_problem("--model", options.model)
        or dataset_problem(options.dataset)
        or columns_problem(options)
        or directory_problem("--output-dir", options.output_dir)
        or (
            directory_problem("--adapters-local", options.adapters_local)
            if options.adapters_local is not None
            else None
        )
        or template_problem(options.response_template)
        or _sidecar_port_problem(options)
    )
    if problem is not None:
        raise BadInput(problem)


def dataset_problem(dataset: str) -> str | None:
    """Why ``--dataset`` can be neither read here nor loaded from the Hub, or None."""
    path = Path(dataset).expanduser()
    if path.suffix in LOCAL_SUFFIXES:
        if path.is_file():
            return None
        return (
            f"--dataset {dataset}: no such file here (a local {'/'.join(LOCAL_SUFFIXES)} file "
            "is read by the trainer itself; a Hub dataset is named ORG/NAME)"
        )
    if path.exists() or is_hub_id(dataset):
        return None
    return f"--dataset {dataset}: no such file or directory here, and not a Hub id (ORG/NAME)"


def columns_problem(options: TrainerOptions) -> str | None:
    """Why a local dataset lacks a column the run reads (``--prompt-column``; with a reward that
    grades answers, ``--answer-column``), or None; a Hub dataset's are checked when it loads."""
    columns = local_columns(options.dataset)
    if columns is None:
        return None
    has = f"it has {', '.join(columns) or 'none'}"
    if options.prompt_column not in columns:
        return (
            f"--dataset {options.dataset}: no column {options.prompt_column!r} ({has}): name the "
            "prompt column with --prompt-column"
        )
    graded = sorted(GRADED & set(options.rewards))
    if graded and options.answer_column not in columns:
        return (
            f"--dataset {options.dataset}: no column {options.answer_column!r}, which the "
            f"{'/'.join(graded)} reward reads ({has}): name the answer column with "
            "--answer-column, or choose other --rewards"
        )
    return None


def local_columns(dataset: str) -> list[str] | None:
    """The columns of a local dataset the trainer reads itself: a JSON-lines file's first row,
    a Parquet file's schema (read from its footer; None without pyarrow, which ``datasets``
    brings); None for anything else."""
    path = Path(dataset).expanduser()
    if path.suffix == ".parquet" and path.is_file():
        if importlib.util.find_spec("pyarrow") is None:
            return None
        import pyarrow.parquet as pq

        return list(pq.read_schema(path).names)
    row = first_row(dataset)
    return None if row is None else list(row)


def first_prompt(dataset: str, column: str) -> object | None:
    """The ``column`` of a local JSON-lines dataset's first row (what ``--rewards auto`` and the
    shape check read), or None: not such a file here, or no such column."""
    row = first_row(dataset)
    return None if row is None else row.get(column)


def first_row(dataset: str) -> dict[str, object] | None:
    """A local JSON-lines dataset's first row, or None: not such a file here (``.jsonl`` and
    ``.json`` are both read a line at a time). ``BadInput`` when it is not a JSON object."""
    path = Path(dataset).expanduser()
    if path.suffix not in (".jsonl", ".json") or not path.is_file():
        return None
    with path.open(encoding="utf-8", errors="replace") as lines:
        first = next((line for line in lines if line.strip()), "")
    try:
        row = json.loads(first) if first else {}
    except json.JSONDecodeError as exc:
        raise BadInput(
            f"--dataset {dataset}: its first row is not JSON ({exc.msg}); the trainer reads one "
            "JSON object per line"
        ) from None
    if not isinstance(row, dict):
        raise BadInput(f"--dataset {dataset}: its first row is not a JSON object")
    return row


def template_problem(spec: str | None) -> str | None:
    if spec is None or spec in FAMILIES or Path(spec).is_file():
        return None
    return f"--response-template {spec}: neither {' nor '.join(FAMILIES)} nor a JSON file here"


def _sidecar_port_problem(options: TrainerOptions) -> str | None:
    topology = options.topology
    if not topology.sidecar or not topology.sidecar_port or not options.world.main_node:
        return None
    problem = listen_problem(topology.sidecar_host, topology.sidecar_port, "proxy")
    return None if problem is None else f"--sidecar-port: {problem}"


def hub_ids(options: TrainerOptions) -> list[tuple[str, str, str]]:
    """(flag, repo type, id) of every input the run would fetch from the Hub."""
    found = []
    if not Path(options.model).expanduser().exists():
        found.append(("--model", "model", options.model))
    dataset = Path(options.dataset).expanduser()
    if dataset.suffix not in LOCAL_SUFFIXES and not dataset.exists():
        found.append(("--dataset", "dataset", options.dataset))
    return found


def check_hub(
    options: TrainerOptions, environ: Mapping[str, str], lookup: HubLookup = HUB_LOOKUP
) -> dict[str, str]:
    """``BadInput`` for a Hub id the Hub does not have, or cannot be asked about (module
    docstring); returns what the ranks' environment needs added (``HF_HUB_OFFLINE=1`` when the
    run goes on from the cache)."""
    wanted = hub_ids(options)
    if not wanted:
        return {}
    if _offline(environ):
        for flag, kind, repo in wanted:
            if not in_cache(kind, repo):
                raise BadInput(
                    f"{flag} {repo}: not in this machine's Hub cache, and {OFFLINE_ENV} is set: "
                    "download it first (or unset it), or pass a local path"
                )
        return {}
    from huggingface_hub import HfApi, constants

    api = HfApi()
    failures = [_look_up(api, flag, kind, repo, lookup) for flag, kind, repo in wanted]
    unreachable = next((failure for failure in failures if failure is not None), None)
    if unreachable is None:
        return {}
    missing = [(flag, repo) for flag, kind, repo in wanted if not in_cache(kind, repo)]
    if missing:
        flag, repo = missing[0]
        raise BadInput(
            f"{flag} {repo}: the Hub ({constants.ENDPOINT}) cannot be reached ({unreachable}): "
            "a network failure; connect this machine (a proxy: HTTPS_PROXY), or download it "
            "elsewhere and pass its local path"
        )
    log.warning(
        "the Hub (%s) cannot be reached (%s): training from this machine's Hub cache "
        "(%s=1 for the ranks)",
        constants.ENDPOINT, unreachable, OFFLINE_ENV,
    )  # fmt: skip
    return {OFFLINE_ENV: "1"}


def _look_up(api: HfApi, flag: str, kind: str, repo: str, lookup: HubLookup) -> str | None:
    """None when the Hub has ``repo``, or answered something else (the libraries say what, if
    it matters); ``BadInput`` when it has not; why nothing answered (the network) else."""
    from huggingface_hub.errors import GatedRepoError, HfHubHTTPError, RepositoryNotFoundError

    info = api.model_info if kind == "model" else api.dataset_info
    try:
        info(repo, timeout=lookup.timeout_s)
    except GatedRepoError:
        raise BadInput(
            f"{flag} {repo}: a gated {kind} on the Hub: ask for access, and train with a token "
            "that has it (HF_TOKEN)"
        ) from None
    except RepositoryNotFoundError:
        raise BadInput(
            f"{flag} {repo}: no such {kind} on the Hub (a private one needs HF_TOKEN with read "
            "access to it)"
        ) from None
    except HfHubHTTPError:
        return None
    # No answer at all. What the client raises for it (a refused connection, DNS, a timeout, a
    # proxy) differs between its versions (httpx, httpx2; OSError), so anything but an answer.
    except Exception as exc:
        return " ".join(str(exc).split()) or type(exc).__name__
    return None


def in_cache(kind: str, repo: str) -> bool:
    """Whether the Hub cache of this machine holds a snapshot of ``repo``."""
    from huggingface_hub import constants

    folder = f"{kind}s--{repo.replace('/', '--')}"
    return (Path(constants.HF_HUB_CACHE) / folder / "snapshots").is_dir()


def _offline(environ: Mapping[str, str]) -> bool:
    names = (OFFLINE_ENV, "TRANSFORMERS_OFFLINE")  # huggingface_hub's own (is_offline_mode)
    return any(environ.get(name, "").upper() in ("1", "ON", "YES", "TRUE") for name in names)
