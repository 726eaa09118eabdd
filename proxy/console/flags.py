"""``rollout-proxy top``'s flags: what ``--help`` shows (each default, the variables it reads),
with every program's help formatter and duration parser (``proxy.config.programs``, ``units``).
"""

from __future__ import annotations

import argparse

from proxy.config.programs import DefaultsFormatter, OneLineParser, version_flag
from proxy.config.units import QUICK, DurationArg

DEFAULT_URL = "http://127.0.0.1:8000"
EPILOG = (
    "The bearer token comes from a variable, never a flag's value: HF_TOKEN for an HF Jobs URL "
    "(*.hf.jobs, whose edge demands it), else PROXY_API_KEY (the proxy's own --api-key)."
)


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="rollout-proxy top",
        description="A live terminal view of a proxy, local or on HF Jobs.",
        formatter_class=DefaultsFormatter,
        epilog=EPILOG,
    )
    version_flag(parser)
    add = parser.add_argument
    add("url", nargs="?", default=DEFAULT_URL, help=f"HOST:PORT or a URL (default: {DEFAULT_URL})")
    add("--once", action="store_true", help="print one plain-text snapshot and exit")
    add(
        "--interval",
        type=DurationArg(bare=QUICK, positive=True),
        default=2.0,
        help="time between refreshes",
    )
    add(
        "--proxy-token-env",
        "--token-env",
        dest="token_env",
        default=None,
        metavar="VAR",
        help="the variable holding the proxy's bearer token, as rollout-trainer's flag of the "
        "same name (default: HF_TOKEN for an *.hf.jobs URL, else PROXY_API_KEY)",
    )
    return parser
