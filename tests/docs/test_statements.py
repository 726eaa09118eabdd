"""Every command and example the documentation shows, checked against the code that runs it.

Read from README.md, the pages under docs/ and the repository pages the site shows
(``tests.support.docs``: the files, the blocks, the annotations). Per fenced block:

- a shell command of this project's programs is parsed by that program's own parser
  (``docsgen.parsers``); ``rollout-proxy`` builds its settings (``proxy.cli.load_settings``);
  the replica's and the trainer's flags go through their own validation; ``rollout-deploy
  up``/``rehearse``/``fleet up`` runs its ``--dry-run`` (no Hub reached), and the trainer the plan
  starts is parsed by the trainer's parser;
- a trainer's dataset is checked against the dataset: ``KNOWN_DATASETS`` (a fixed table of the
  public datasets the docs use: their configurations and columns, as the Hub lists them), or
  the rows ``python -m trainer_entry.math_data`` writes when the same block made the file;
- ``make TARGET`` names a Makefile target; ``pip install`` names extras pyproject.toml has, and
  never rollout-proxy by name (it is not published on PyPI);
- a command uses each flag's name in use, never a deprecated one (``proxy.config.deprecated``);
- Python is compiled; TOML is read, and a proxy's settings file loads through the settings
  loader; JSON and YAML parse;
- every dollar figure in the prose is one a command prints or ``deploy.prices`` lists: an hourly
  cost after a ``deploy`` command is what that command's ``--dry-run`` prints (for a fleet that
  sizes itself, either end of the range it prints), a price table's
  row is the price deploy uses, anything else a plan's cap (as its ``--dry-run`` prints it) or a
  listed price;
- what ``tests.support.claims`` holds: how long a command takes (one figure wherever it is said),
  the CPU recipe's sizes, and the repository paths a page names.

Anything else in a block that is not annotated fails the test, so nothing is skipped silently.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import re
import shlex
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from deploy.cli import Runtime
from deploy.cli import main as deploy_main
from deploy.prices import DOLLARS_PER_HOUR
from docsgen import parsers
from proxy.config.deprecated import DeprecatedNames
from tests.support.claims import (
    TIMINGS,
    cpu_recipe_problems,
    missing_paths,
    timing_problems,
    timings_found,
    unpublished_installs,
)
from tests.support.clock import SteppingClock
from tests.support.docs import ROOT, Block, Command, blocks, commands, doc_files, prose
from tests.support.programs import walk
from trainer_entry.recipe import CPU_SIZES

SHELLS = {"bash", "sh", "shell", "console"}
CHECKED_LANGS = SHELLS | {"python", "toml", "json", "yaml", "mermaid"}
# Shell built-ins and standard tools a block may use around the project's commands.
SHELL_TOOLS = {"export", "cd", "mkdir", "echo", "cat", "ls", "rm", "kill", "wait", "sleep",
               "openssl", "true", "source"}  # fmt: skip
PYTHON = re.compile(r"^(?:\S*/)?python3?(?:\.\d+)?$")
HUB = "http://127.0.0.1:9"  # nothing answers there: a dry run needs no Hub
FLAG = re.compile(r"^\[?(--?[A-Za-z][\w-]*)")


@dataclass(frozen=True)
class Dataset:
    configs: tuple[str, ...]  # empty: the dataset has one, chosen without --dataset-config
    columns: tuple[str, ...]
    answer_format: str | None = None  # what its rows' prompts ask for, when they ask


# The public datasets the docs train on, as the Hub lists them (dataset card and viewer).
KNOWN_DATASETS = {
    "openai/gsm8k": Dataset(configs=("main", "socratic"), columns=("question", "answer")),
}
# What ``python -m trainer_entry.math_data OUT`` writes: conversations whose system turn asks
# for ``<think>...</think> Answer: N`` (trainer_entry.prompts.THINK_ANSWER).
MATH_DATA = Dataset(configs=(), columns=("prompt", "answer"), answer_format="Answer: N")
REWARDS_FOR_FORMAT = {"Answer: N": {"math", "format"}}


@dataclass
class Plan:
    """A ``deploy`` command's dry run: where it is written, and the cost line it printed after
    its specs (``deploy.prices.plan_cost``: per hour, and the bound its time caps set)."""

    offset: int
    printed: str

    def per_hour(self) -> str:
        found = re.search(r"\$[\d,.]+ per hour \([^)]*\)", self.printed)
        assert found, f"--dry-run printed no cost per hour: {self.printed!r}"
        return found.group()

    def dollars_per_hour(self) -> float:
        return _dollars(self.per_hour())

    def scaled(self) -> set[float]:
        """The ends of a fleet that sizes itself's cost range, as the dry run says (``as it
        scales the run costs $A to $B per hour``; none for a fixed fleet)."""
        found = re.search(r"as it scales the run costs (\$[\d,.]+) to (\$[\d,.]+) per hour",
                          self.printed)  # fmt: skip
        return {round(_dollars(found[1]), 2), round(_dollars(found[2]), 2)} if found else set()

    def cap(self) -> float:
        """What nobody stopping the run costs, as the dry run says."""
        found = re.search(r"bound it at (\$[\d,.]+)", self.printed)
        assert found, f"--dry-run printed no bound: {self.printed!r}"
        return _dollars(found[1])


def _dollars(text: str) -> float:
    return float(text.lstrip("$").split()[0].replace(",", ""))


@dataclass
class Checked:
    """What the checks of one file found: problems, the deploy plans, datasets made."""

    problems: list[str] = field(default_factory=list)
    plans: list[Plan] = field(default_factory=list)
    made: dict[str, Dataset] = field(default_factory=dict)  # path -> its rows (this file)


def _module(words: list[str]) -> tuple[str | None, list[str]]:
    """The project module a command runs and its arguments; (None, words) for another program."""
    if words[0] in parsers.SCRIPTS:
        return parsers.SCRIPTS[words[0]], words[1:]
    python = PYTHON.match(words[0]) or words[0] == "$PY"
    if (
        python
        and words[1:2] == ["-m"]
        and words[2:3]
        and words[2].split(".")[0] in parsers.PACKAGES
    ):
        return words[2], words[3:]
    return None, words


@contextlib.contextmanager
def _quiet() -> Iterator[io.StringIO]:
    """stdout and stderr of a parse, which argparse writes to directly."""
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        yield err


def _parse(
    parser: argparse.ArgumentParser, words: list[str]
) -> tuple[argparse.Namespace | None, str]:
    with _quiet() as err:
        try:
            return parser.parse_args(words), ""
        except SystemExit as exc:
            if exc.code == 0:  # --help, --version
                return None, ""
            return None, err.getvalue().strip() or f"exit {exc.code}"


def check_dataset(args: argparse.Namespace, checked: Checked) -> list[str]:
    """A trainer's dataset flags against the dataset's configurations and columns."""
    dataset = checked.made.get(args.dataset) or KNOWN_DATASETS.get(args.dataset)
    local = args.dataset.endswith((".jsonl", ".json", ".parquet")) or "/" not in args.dataset
    if dataset is None:
        if local:
            return []  # a file of the user's, written elsewhere: its columns are theirs
        return [f"--dataset {args.dataset}: not in KNOWN_DATASETS: add its configs and columns"]
    problems = []
    if dataset.configs and args.dataset_config not in dataset.configs:
        problems.append(
            f"--dataset {args.dataset} needs --dataset-config, one of {dataset.configs} "
            f"(got {args.dataset_config})"
        )
    if args.prompt_column not in dataset.columns:
        problems.append(
            f"--dataset {args.dataset} has no column {args.prompt_column!r} "
            f"(--prompt-column; it has {dataset.columns})"
        )
    rewards = {name.strip() for name in args.rewards.split(",")}
    if rewards & {"boxed", "math"} and args.answer_column not in dataset.columns:
        problems.append(
            f"--dataset {args.dataset} has no column {args.answer_column!r} (--answer-column, "
            f"which --rewards {args.rewards} reads)"
        )
    wanted = REWARDS_FOR_FORMAT.get(dataset.answer_format or "")
    if wanted and not rewards & wanted:
        problems.append(
            f"--dataset {args.dataset}: its prompts ask for {dataset.answer_format}, which "
            f"--rewards {args.rewards} does not read (use one of {sorted(wanted)})"
        )
    return problems


def check_trainer(words: list[str], checked: Checked, here: bool) -> list[str]:
    from trainer_entry.freeze import options_from_args

    parser = parsers.trainer_parser()
    args, problem = _parse(parser, words)
    if args is None:
        return [problem] if problem else []
    env = {"HF_TOKEN": "hf_x", "VLLM_API_KEY": "k", "FLEET_ADMIN_KEY": "k", "REPLICA_KEY": "k"}
    with _quiet() as err:
        try:
            options_from_args(args, parser, env, here=here)
        except SystemExit:
            return [err.getvalue().strip()]
    return check_dataset(args, checked)


def planned_trainer(specs: list[dict[str, Any]]) -> list[str]:
    """The trainer's flags as its job will run them (the last part of its shell command)."""
    for spec in specs:
        if spec["role"] == "trainer":
            return shlex.split(spec["command"][-1].split("-m trainer_entry", 1)[1])
    return []


def check_deploy(words: list[str], offset: int, checked: Checked) -> list[str]:
    split = words.index("--") if "--" in words else len(words)
    own, trainer = words[:split], words[split + 1 :]
    args, problem = _parse(parsers.deploy_parser(), own)
    if args is None:
        return [problem] if problem else []
    planning = args.command in ("up", "rehearse") or getattr(args, "fleet_command", "") == "up"
    if not planning:
        return []
    out, err = io.StringIO(), io.StringIO()
    runtime = Runtime(clock=SteppingClock(), token=lambda: None, out=out, err=err)
    head = 2 if own[0] == "fleet" else 1
    argv = [*own[:head], "--hub-endpoint", HUB, *own[head:], "--dry-run", "--", *trainer]
    if deploy_main(argv, runtime) != 0:
        return [f"its dry run failed: {err.getvalue().strip()}"]
    specs = json.loads(out.getvalue())
    checked.plans.append(Plan(offset, err.getvalue()))
    planned = planned_trainer(specs)
    return check_trainer(planned, checked, here=False) if planned else []


def check_proxy(words: list[str], env: dict[str, str]) -> list[str]:
    from proxy.cli import load_settings

    if words[:1] == ["top"]:
        _, problem = _parse(parsers.top_parser(), words[1:])
        return [problem] if problem else []
    clean = {k: v for k, v in os.environ.items() if not k.startswith("PROXY_")}
    with pytest.MonkeyPatch.context() as patch, _quiet() as err:
        patch.setattr(os, "environ", {**clean, **env})
        patch.chdir(ROOT)
        try:
            load_settings(words)
        except SystemExit as exc:
            return [] if exc.code == 0 else [err.getvalue().strip()]
    return []


def check_replica(words: list[str], env: dict[str, str]) -> list[str]:
    reading = parsers.command_parser("replica_entry", words)
    if "vllm" in reading.program:
        from replica_entry.vllm_backend import options_from_args, split_passthrough

        own, extra = split_passthrough(words)
        args, problem = _parse(reading.parser, own)
        if args is None:
            return [problem] if problem else []
        with _quiet() as err:
            try:
                options_from_args(args, extra, reading.parser, env)
            except SystemExit:
                return [err.getvalue().strip()]
        return []
    from replica_entry.cli import settings_from_args

    args, problem = _parse(reading.parser, words)
    if args is None:
        return [problem] if problem else []
    with _quiet() as err:
        try:
            settings_from_args(args, reading.parser)
        except SystemExit:
            return [err.getvalue().strip()]
    return []


def check_make(words: list[str]) -> list[str]:
    targets = set(re.findall(r"^([\w-]+):", (ROOT / "Makefile").read_text(), re.M))
    return [
        f"make {t}: no such target" for t in words[1:] if not t.startswith("-") and t not in targets
    ]


def check_pip(words: list[str]) -> list[str]:
    with (ROOT / "pyproject.toml").open("rb") as handle:
        extras = set(tomllib.load(handle)["project"]["optional-dependencies"])
    problems = [
        f"{word}: not on PyPI (install from a checkout: pip install -e '.[EXTRA]')"
        for word in words
        if re.fullmatch(r"rollout-proxy(?:\[.*\])?", word)
    ]
    for word in words:
        found = re.fullmatch(r"\.\[([\w,-]+)\]", word)
        if found:
            problems += [
                f"no extra {x!r} in pyproject.toml" for x in found[1].split(",") if x not in extras
            ]
    return problems


def check_flag_names(module: str, words: list[str]) -> list[str]:
    """A synopsis line: each flag it names exists (the deploy trainer's after ``--``)."""
    split = words.index("--") if "--" in words else len(words)
    own, after = words[:split], words[split + 1 :]
    reading = parsers.command_parser(module, own)
    known = parsers.flag_names(reading.parser)
    for word in reading.words:
        sub = parsers.subcommands(reading.parser).get(word)
        if sub is not None:
            known |= parsers.flag_names(sub)
            for inner in parsers.subcommands(sub).values():
                known |= parsers.flag_names(inner)
    names = [m[1] for w in reading.words if (m := FLAG.match(w))]
    problems = [f"{reading.program} has no flag {name}" for name in names if name not in known]
    if module == "deploy" and after:
        trainer = parsers.flag_names(parsers.trainer_parser())
        names = [m[1] for w in after if (m := FLAG.match(w))]
        problems += [f"rollout-trainer has no flag {n}" for n in names if n not in trainer]
    return problems


def deprecated_words(module: str, words: list[str]) -> list[str]:
    """The deprecated flag names ``words`` use (the deploy trainer's after ``--`` too)."""
    split = words.index("--") if "--" in words else len(words)
    own, after = words[:split], words[split + 1 :]
    readings = [(parsers.command_parser(module, own).parser, own)]
    if module == "deploy" and after:
        readings.append((parsers.trainer_parser(), after))
    problems = []
    for parser, said in readings:
        old = {
            name: action.option_strings[0]
            for sub in walk(parser)
            for action in sub._actions
            if isinstance(action, DeprecatedNames)
            for name in action.deprecated
        }
        given = [word.split("=", 1)[0] for word in said]
        problems += [f"{name} is deprecated: use {old[name]}" for name in given if name in old]
    return problems


def check_command(command: Command, block: Block, checked: Checked) -> list[str]:
    words = command.words
    module, args = _module(words)
    if module is not None and module.split(".")[0] in parsers.PACKAGES:
        try:
            deprecated = deprecated_words(module, args)
        except (ImportError, LookupError):
            deprecated = []  # said below, by the check of the command itself
        if deprecated:
            return deprecated
    if block.note == "synopsis":
        return check_flag_names(module, args) if module is not None else []
    if words[0] == "make":
        return check_make(words)
    if "pip" in words[:3] and "install" in words:
        return check_pip(words)
    module, args = _module(words)
    if module is None:
        if words[0] in SHELL_TOOLS or block.note in ("not-run", "run-by"):
            return []
        return [f"{words[0]}: not a program these checks know: annotate the block "
                "(<!-- not-run: why -->)"]  # fmt: skip
    if module == "deploy":
        return check_deploy(args, block.offset, checked)
    if module == "proxy":
        return check_proxy(args, command.env)
    if module == "replica_entry":
        return check_replica(args, command.env)
    if module == "trainer_entry":
        return check_trainer(args, checked, here=False)
    if module == "trainer_entry.math_data":
        parsed, problem = _parse(parsers.module_parser(module), args)
        if parsed is not None:
            checked.made[str(parsed.out)] = MATH_DATA
        return [problem] if problem else []
    try:
        reading = parsers.command_parser(module, args)
    except (ImportError, LookupError) as exc:
        return [f"python -m {module}: {exc}"]
    _, problem = _parse(reading.parser, reading.words)
    return [problem] if problem else []


def check_config(text: str) -> list[str]:
    """A TOML block: read, and loaded as the proxy's settings file when it is one."""
    from proxy.config import flat_fields

    try:
        values = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        return [f"TOML: {exc}"]
    if not set(values) <= set(flat_fields()) | {"config"}:
        return []  # not the proxy's file (pyproject.toml's tables, say)
    return check_settings_file(text)


def check_settings_file(text: str, name: str = "proxy.toml") -> list[str]:
    from proxy.cli import load_settings

    with pytest.MonkeyPatch.context() as patch, _quiet() as err:
        tmp = Path(os.environ.get("TMPDIR", "/tmp")) / f"docs-check-{os.getpid()}-{name}"
        tmp.write_text(text)
        clean = {k: v for k, v in os.environ.items() if not k.startswith("PROXY_")}
        patch.setattr(os, "environ", clean)
        try:
            load_settings(["--config", str(tmp)])
        except SystemExit:
            return [f"the proxy refuses it: {err.getvalue().strip()}"]
        finally:
            tmp.unlink()
    return []


def check_block(block: Block, checked: Checked) -> list[str]:
    if block.lang not in CHECKED_LANGS and block.note is None:
        return [f"a ```{block.lang or '(no language)'} block: annotate it (<!-- not-run: why -->)"]
    if block.lang == "python":
        try:
            compile(block.body, block.where, "exec")
        except SyntaxError as exc:
            return [f"Python: {exc}"]
        return []
    if block.lang == "toml":
        return check_config(block.body)
    if block.lang == "json":
        try:
            json.loads(block.body)
        except ValueError as exc:
            return [f"JSON: {exc}"]
        return []
    if block.lang == "yaml":
        yaml.safe_load(block.body)
        return []
    if block.lang == "mermaid":
        return []
    if block.lang not in SHELLS and block.note != "not-run":
        return []
    problems = []
    for command in commands(block.body, prompt_only=block.lang not in SHELLS):
        problems += [f"`{command.text}`: {p}" for p in check_command(command, block, checked)]
    return problems


# "$25.00 per hour (3 x h200, 1 x h200x2)", "$25 an hour", and any other dollar figure.
_DOLLARS = re.compile(r"\$(\d[\d,]*(?:\.\d\d)?)(?:\s+(?:per|an)\s+hour(?:\s+\(([^)]*)\))?)?")
_PRICE_ROW = re.compile(r"^\|\s*`([\w-]+)`\s*\|.*\|\s*(\d+\.\d\d)\s*\|", re.M)


def check_costs(path: Path, checked: Checked) -> list[str]:
    text = prose(path)
    problems = []
    for flavor, price in _PRICE_ROW.findall(text):
        if DOLLARS_PER_HOUR.get(flavor) != float(price):
            problems.append(
                f"{flavor} at ${price}: deploy.prices has {DOLLARS_PER_HOUR.get(flavor)}"
            )
    known = {round(v, 2) for plan in checked.plans for v in (plan.dollars_per_hour(), plan.cap())}
    known |= {round(v, 2) for v in DOLLARS_PER_HOUR.values()}
    for found in _DOLLARS.finditer(text):
        amount = float(found[1].replace(",", ""))
        line = text.count("\n", 0, found.start()) + 1
        if "hour" in found.group():
            before = [p for p in checked.plans if p.offset < found.start()]
            if found[2] is not None:  # the plan named by its jobs: one of the plans above
                said = f"${amount:.2f} per hour ({' '.join(found[2].split())})"
                if said not in {plan.per_hour() for plan in before}:
                    shown = "; ".join(plan.per_hour() for plan in before) or "none"
                    problems.append(f"line {line}: {said}: no plan above costs that ({shown})")
            elif not before:
                problems.append(f"line {line}: ${found[1]} per hour, after no deploy command")
            elif (
                round(amount, 2) != round(before[-1].dollars_per_hour(), 2)
                and round(amount, 2) not in before[-1].scaled()
            ):
                problems.append(
                    f"line {line}: ${found[1]} per hour, the plan above: {before[-1].per_hour()}"
                )
        elif round(amount, 2) not in known:
            problems.append(f"line {line}: ${found[1]}: no plan above costs that, nor a price")
    return problems


def _files() -> list[Path]:
    return doc_files()


def made_in_prose(path: Path) -> dict[str, Dataset]:
    """Datasets the page's text says a command writes (``python -m trainer_entry.math_data X``)."""
    text = path.read_text()
    return {
        name: MATH_DATA for name in re.findall(r"trainer_entry\.math_data\s+(\S+\.jsonl)", text)
    }


@pytest.mark.parametrize("path", _files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_block_and_figure_of_the_page_is_true(path: Path) -> None:
    checked = Checked(made=made_in_prose(path))
    for block in blocks(path):
        checked.problems += [f"{block.where}: {p}" for p in check_block(block, checked)]
    checked.problems += [f"{path.relative_to(ROOT)}: {p}" for p in check_costs(path, checked)]
    claims = [*timing_problems(path), *cpu_recipe_problems(path, CPU_SIZES)]
    claims += [f"{p}: no such file in a checkout" for p in missing_paths(path)]
    checked.problems += [f"{path.relative_to(ROOT)}: {p}" for p in claims]
    assert checked.problems == []


def test_the_pages_checked_are_the_ones_shown() -> None:
    names = {str(path.relative_to(ROOT)) for path in _files()}
    assert {"README.md", "SECURITY.md", "CHANGELOG.md", "benchmarks/README.md"} <= names
    assert any(name.startswith("docs/") for name in names)


def test_every_example_config_loads_through_the_settings_loader() -> None:
    examples = sorted((ROOT / "examples").glob("*.toml"))
    assert examples, "examples/ holds no config file"
    for example in examples:
        assert check_settings_file(example.read_text(), example.name) == [], example.name


def test_a_dataset_without_the_columns_named_is_refused() -> None:
    args = argparse.Namespace(
        dataset="openai/gsm8k", dataset_config=None, prompt_column="prompt",
        answer_column="answer", rewards="boxed",
    )  # fmt: skip
    problems = check_dataset(args, Checked())
    assert any("needs --dataset-config" in p for p in problems)
    assert any("no column 'prompt'" in p for p in problems)
    made = Checked(made={"d.jsonl": MATH_DATA})
    args = argparse.Namespace(
        dataset="d.jsonl", dataset_config=None, prompt_column="prompt",
        answer_column="answer", rewards="boxed",
    )  # fmt: skip
    assert any("ask for Answer: N" in p for p in check_dataset(args, made))


def test_a_cost_the_plan_does_not_make_is_refused(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "```bash\npython -m deploy up --bucket my-org/rollouts --model m --replica-count 3 "
        "-- --dataset d.jsonl\n```\n\nIt costs about $20 per hour, $127.50 at most.\n"
    )
    checked = Checked()
    for block in blocks(page):
        assert check_block(block, checked) == []
    problems = check_costs(page, checked)
    assert any("$20 per hour, the plan above: $25.00 per hour" in p for p in problems)
    assert any("$127.50: no plan above costs that" in p for p in problems)


def test_an_unknown_program_in_a_plain_block_is_refused(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "```bash\nhf jobs ps\n```\n\n<!-- not-run: the Hub -->\n```bash\nhf jobs ps\n```\n"
    )
    found = [check_block(block, Checked()) for block in blocks(page)]
    assert found[0] and "annotate the block" in found[0][0]
    assert found[1] == []


def test_a_flag_no_parser_knows_is_refused() -> None:
    block = Block(Path("x.md"), 1, 0, "bash", "", "synopsis", "")
    problems = check_command(
        Command(["rollout-proxy", "--no-such-flag"], {}, False, ""), block, Checked()
    )
    assert problems == ["rollout-proxy has no flag --no-such-flag"]
    plain = Block(Path("x.md"), 1, 0, "bash", "", None, "")
    problems = check_command(
        Command(
            ["rollout-trainer", *("--model", "m", "--dataset", "d.jsonl", "--output-dir", "o"),
             *("--proxy-url", "http://p:8000", "--bogus", "1")],
            {}, False, "",
        ),
        plain,
        Checked(),
    )  # fmt: skip
    assert problems and "unrecognized arguments: --bogus" in problems[0]


# Files beside the pages that state how long a command takes: the Makefile's comments on its
# targets, and the docstrings of the modules the pages run.
TIMED_SOURCES = ("Makefile", "trainer_entry/tiny_model.py", "benchmarks/learn/cli.py")


def test_every_timing_is_said_and_agrees_beyond_the_pages() -> None:
    """``make docs`` was "about 2 s" on one page and "about 3 s" in the Makefile; each figure of
    ``TIMINGS`` is now said at least once, and the same wherever it is said."""
    sources = [ROOT / name for name in TIMED_SOURCES]
    assert [p for path in sources for p in timing_problems(path)] == []
    said = timings_found([*doc_files(), *sources])
    assert [t for t in TIMINGS if (t.name, t.figure) not in said] == []


def test_a_figure_said_otherwise_is_refused(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "```bash\nmake docs        # the site (about 2 s)\n```\n\nThe tiny run takes about 45 s.\n"
        "Without CUDA the trainer takes one micro-batch of 16384 tokens.\n\n"
        "The CPU-sized flags matter: the defaults are the GPU recipe.\n\n"
        "Every flag, with its default: docs/reference/rollout-proxy.md.\n"
    )
    problems = [*timing_problems(page), *cpu_recipe_problems(page, CPU_SIZES)]
    assert any("'make docs': about 3 s wherever it is said, not 'about 2 s'" in p for p in problems)
    assert any("'The tiny run takes': 45 s to 3.5 minutes" in p for p in problems)
    assert any("token_budget is 256, not 16384" in p for p in problems)
    assert any("said of every machine" in p for p in problems)
    assert missing_paths(page) == ["docs/reference/rollout-proxy.md"]


def test_the_examples_name_only_paths_a_checkout_has() -> None:
    examples = sorted((ROOT / "examples").iterdir())
    assert {str(p.relative_to(ROOT)): missing_paths(p) for p in examples} == {
        str(p.relative_to(ROOT)): [] for p in examples
    }


def test_no_install_hint_names_a_package_pypi_does_not_have() -> None:
    """rollout-proxy is not published on PyPI: every program's hint says ``pip install -e
    '.[EXTRA]'`` (``programs.install_hint``), as the pages do."""
    sources = [p for package in parsers.PACKAGES for p in sorted((ROOT / package).rglob("*.py"))]
    found = {
        str(path.relative_to(ROOT)): lines
        for path in [*sources, *doc_files(), ROOT / "Makefile"]
        if (lines := unpublished_installs(path.read_text()))
        and path.name != "CHANGELOG.md"  # it may say what once was
    }
    assert found == {}
    assert check_pip(["pip", "install", "rollout-proxy[trainer]"]) == [
        "rollout-proxy[trainer]: not on PyPI (install from a checkout: pip install -e '.[EXTRA]')"
    ]


def test_a_deprecated_flag_name_in_a_command_is_refused() -> None:
    plain = Block(Path("x.md"), 1, 0, "bash", "", None, "")
    for words, said in [
        (
            ["rollout-proxy", "--replicas", "http://a:1"],
            "--replicas is deprecated: use --replica-urls",
        ),
        (["python", "-m", "deploy", "status", "--replicas", "1"], "use --replica-count"),
        (["rollout-replica", "--backend", "sim", "--model", "m"], "use --served-model-name"),
        (["python", "-m", "benchmarks", "fleet", "--runs", "2"], "use --run-count"),
    ]:
        problems = check_command(Command(words, {}, False, ""), plain, Checked())
        assert problems and said in problems[0], (words, problems)
