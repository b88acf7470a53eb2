"""``hpccoll report``: markdown tables from ``hpccoll bench --json`` files."""

from __future__ import annotations

import argparse
from typing import Any

from . import arguments


def add_parser(subparsers: Any) -> None:
    """``hpccoll report`` on the ``hpccoll`` parser's subparsers."""
    parser = subparsers.add_parser("report", help="markdown tables from bench --json files")
    parser.add_argument("files", nargs="+", metavar="FILE", type=arguments.bench_results)
    parser.set_defaults(handler=run, prog=parser.prog)


def run(args: argparse.Namespace) -> int:
    from .results import report
    print(report(args.files))
    return 0
