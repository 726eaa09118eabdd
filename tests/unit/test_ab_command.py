"""``python -m benchmarks ab``'s command line: its flags in their own group of the suites' help,
each saying what it does, no reStructuredText in the help; sides, sizes and defaults read as
meant; and another revision's tree runs its own proxy."""

from __future__ import annotations

import argparse
import subprocess
from pathlib import Path

import pytest

from benchmarks.__main__ import build_parser
from benchmarks.suites.ab.flags import token_sizes
from benchmarks.suites.ab.suite import plan_of
from benchmarks.suites.ab.targets import Target, builds, parse_target


def test_the_help_reads_as_plain_text_with_the_ab_flags_in_their_group() -> None:
    text = build_parser().format_help()
    assert "``" not in text
    group = text[text.index("\nab:\n") :]
    for flag in ("--a", "--b", "--rounds", "--concurrency", "--tokens", "--stream", "--chunks"):
        assert f"  {flag} " in group, flag
    assert "ab:" in text[: text.index("\nab:\n")]  # --requests names its ab meaning too


def test_the_sides_and_the_sizes_are_read_as_written() -> None:
    args = build_parser().parse_args(
        ["ab", "--a", "proxy@HEAD~1", "--b", "proxy", "--tokens", "600, 3000"]
    )
    assert args.a == Target("proxy", "HEAD~1") and args.b == Target("proxy")
    assert args.tokens == (600, 3000)


def test_defaults_passthrough_against_the_proxy_eight_rounds_at_64() -> None:
    plan = plan_of(build_parser().parse_args(["ab"]))
    assert (plan.a, plan.b) == (Target("passthrough"), Target("proxy"))
    assert (plan.rounds, plan.requests, plan.concurrency) == (8, 10_000, 64)
    assert (plan.tokens, plan.stream_chunks, plan.delay_s, plan.order) == (
        (600, 3000),
        0,
        0.0,
        "abba",
    )
    quick = plan_of(build_parser().parse_args(["ab", "--quick", "--stream"]))
    assert (quick.rounds, quick.requests, quick.stream_chunks) == (4, 400, 40)


@pytest.mark.parametrize("text", ["proxy@", "passthrough@HEAD", "nginx", ""])
def test_a_side_that_is_none_of_the_three_is_refused(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="proxy, passthrough or proxy@REV"):
        parse_target(text)


def test_a_size_list_with_nothing_in_it_is_refused() -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="one prompt size or more"):
        token_sizes(" , ")


def test_another_revisions_tree_imports_its_own_proxy(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    (repo / "proxy").mkdir(parents=True)
    (repo / "proxy" / "__init__.py").write_text('BUILD = "old"\n')

    def git(*args: str) -> None:
        subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True)

    git("init", "-q")
    git("add", ".")
    git("-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-qm", "old")
    with builds([Target("proxy", "HEAD")], root=repo) as found:
        build = found[Target("proxy", "HEAD")]
        assert (build.tree / "proxy" / "__init__.py").read_text() == 'BUILD = "old"\n'
        assert build.env["PYTHONPATH"].startswith(str(build.tree))
        assert build.label.startswith("proxy@HEAD (") and build.commit is not None
        tree = build.tree
    assert not tree.exists()  # removed with the run
    with (
        pytest.raises(RuntimeError, match="names no commit"),
        builds([Target("proxy", "no-such-rev")], root=repo),
    ):
        pass
