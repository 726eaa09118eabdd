"""python -m benchmarks SUITE [--json OUT] [--plot DIR] [--quick]   (also: make bench)

Suites:
  overhead  CPU and latency over the transport floor
  ab        two servers' CPU per request, paired: the proxy and the bare pass-through (or two
            builds of the proxy) alternated in rounds in front of the same replicas
  routing   cache hit rate and balance per policy
  fleet     step time of async GRPO on a simulated fleet, per policy (its own flags:
            python -m benchmarks fleet --help)
  sync      adapter fleet-sync latency under mount lag (--save: the published adapter's save)
  policy    the routing policy alone
  soak      RSS, open files and tasks under load over time
  scale     throughput and memory against fleet size and tracked prompts
  burst     a first wave: thousands of new connections at once on a busy machine (--hogs,
            --kill-one)
  profile   where the proxy's CPU goes, by module, under cProfile
  learn     real TRL and vLLM CPU servers: a run that learns, through the proxy and direct
            (python -m benchmarks learn --help)

Everything runs on loopback against simulated replicas; --replica-urls URL[,URL...] points
overhead and soak at real ones. A run exits 1 when a suite reports a failed row (ab: a round
with errors), after its table and JSON.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from benchmarks import report
from benchmarks.suites import SUITES, run
from benchmarks.suites.ab.flags import add_flags as add_ab_flags
from proxy.config.deprecated import DeprecatedNames
from proxy.config.programs import (
    OneLineParser,
    RawDescriptionDefaultsFormatter,
    help_text,
    version_flag,
)
from proxy.config.units import DurationArg

PROG = "python -m benchmarks"
MAX_MODELS_BYTES = 1 << 20  # a model listing is a few hundred bytes


def _urls(text: str) -> list[str]:
    urls = [u.strip().rstrip("/") for u in text.split(",") if u.strip()]
    for url in urls:
        if not url.startswith(("http://", "https://")):
            raise argparse.ArgumentTypeError(f"not an http(s) URL: {url!r}")
    return urls


def _replica_problem(urls: list[str], timeout_s: float = 5.0) -> str | None:
    """Why one of the ``--replica-urls`` cannot stand in for a replica: it gives no answer at all
    (any HTTP status is an answer), or its ``/v1/models`` lists no model (the suites read the
    model's name and context there), said in one line."""
    for url in urls:
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=timeout_s):
                pass
        except urllib.error.HTTPError:
            pass
        except (urllib.error.URLError, OSError) as exc:
            why = getattr(exc, "reason", exc)
            return (
                f"argument --replica-urls: {url} does not answer ({why}): start the replicas "
                "first, or leave --replica-urls out to run against simulated ones"
            )
        if (problem := _models_problem(url, timeout_s)) is not None:
            return (
                f"argument --replica-urls: {url}/v1/models {problem}: name a vLLM server or a "
                "rollout-replica"
            )
    return None


def _models_problem(url: str, timeout_s: float) -> str | None:
    try:
        with urllib.request.urlopen(f"{url}/v1/models", timeout=timeout_s) as answer:
            listed = json.loads(answer.read(MAX_MODELS_BYTES))
    except urllib.error.HTTPError as exc:
        return f"answered HTTP {exc.code}"
    except (urllib.error.URLError, OSError) as exc:
        return f"gave no answer ({getattr(exc, 'reason', exc)})"
    except ValueError:
        return "answered something that is not JSON"
    data = listed.get("data") if isinstance(listed, dict) else None
    if not (isinstance(data, list) and data and isinstance(data[0], dict) and "id" in data[0]):
        return "lists no model"
    return None


def build_parser() -> argparse.ArgumentParser:
    """The suites' parser, ``ab``'s group included (``fleet`` and ``learn`` have their own:
    ``--help`` after them)."""
    parser = OneLineParser(
        prog=PROG, description=help_text(__doc__), formatter_class=RawDescriptionDefaultsFormatter
    )
    version_flag(parser, PROG)
    add = parser.add_argument
    add("suite", choices=[*sorted(SUITES), "fleet", "learn"], help="the suite to run")
    add("--json", type=Path, metavar="PATH", help="write results (with the environment) here")
    add("--plot", type=Path, metavar="DIR", help="write PNG charts into this directory")
    add("--quick", action="store_true", help="a smaller grid (minutes)")
    add(
        "--seconds",
        type=DurationArg(positive=True),
        help="soak: how long to run (a bare number: seconds; default: 5 min, 20 s with --quick)",
    )
    add(
        "--replica-urls",
        "--replicas",
        action=DeprecatedNames,
        deprecated={"--replicas": "--replicas is a count of replica jobs in rollout-deploy"},
        dest="replicas",
        type=_urls,
        default=[],
        metavar="URLS",
        help="overhead, soak: real replicas (URL[,URL...]) instead of local simulated ones",
    )
    add(
        "--requests",
        type=int,
        help="overhead: requests per target and repeat (default: 6,000); ab: per side and round "
        "(default: 10,000, 2,000 with --stream; a fifth of that with --quick); burst: per wave "
        "(default: 5,000, 1,000 with --quick)",
    )
    add(
        "--hogs",
        type=int,
        default=2,
        metavar="N",
        help="burst: busy loops beside the run, keeping the machine's cores busy",
    )
    add(
        "--kill-one",
        action="store_true",
        help="burst: SIGKILL one replica during the streamed wave (it must be ejected, its streams "
        "continue elsewhere)",
    )
    add(
        "--push",
        action="store_true",
        help="sync: adapter push against the mount path (sizes, fleet sizes, link limits)",
    )
    add(
        "--save",
        action="store_true",
        help="sync: the published adapter's save time on local disk (needs torch, safetensors)",
    )
    add_ab_flags(parser)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["fleet"]:  # many model flags of its own
        from benchmarks.fleet.cli import main as fleet_main

        return fleet_main(argv[1:])
    if argv[:1] == ["learn"]:  # real TRL and vLLM: the heavy tier's Python
        from benchmarks.learn.cli import main as learn_main

        return learn_main(argv[1:])
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.suite == "ab" and args.replicas:
        parser.error("argument --replica-urls: ab runs against its own fast replicas")
    if problem := report.output_problem(args.json, args.plot) or _replica_problem(args.replicas):
        parser.error(problem)
    started = time.monotonic()
    report.take_written()  # a run names only what it wrote itself
    print(f"benchmarks: suite {args.suite}{' (quick)' if args.quick else ''}")
    try:
        results, text = run(args.suite, args)
    except RuntimeError as exc:  # a server that did not start or answer, a revision that is none
        print(f"{PROG} {args.suite}: {exc}", file=sys.stderr)
        return 1
    print(text)
    print(f"({time.monotonic() - started:.0f} s)")
    if args.json:
        env = report.environment({"suite": args.suite, "quick": args.quick})
        report.write_json(args.json, args.suite, env, results)
    if closing := report.closing_line(report.take_written()):
        print(closing)
    return 1 if any(row.get("failed") for row in results) else 0


if __name__ == "__main__":
    raise SystemExit(main())
