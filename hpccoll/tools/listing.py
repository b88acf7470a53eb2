"""``hpccoll list`` and ``hpccoll catalogue``: the registered algorithms, as a table on the
terminal or as the catalogue's pages (:mod:`hpccoll.tools.catalogue`)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any


def add_parser(subparsers: Any) -> None:
    """``hpccoll list`` and ``hpccoll catalogue`` on the ``hpccoll`` parser's subparsers."""
    listing = subparsers.add_parser("list", help="the registered algorithms")
    listing.add_argument("--markdown", action="store_true", help="as a markdown table")
    listing.set_defaults(handler=list_algorithms, prog=listing.prog)
    catalogue = subparsers.add_parser("catalogue", help="write the algorithm catalogue (table, "
                                                        "one page and schedule pictures per "
                                                        "family)")
    catalogue.add_argument("--out", default="algorithms", help="directory, default algorithms")
    catalogue.set_defaults(handler=write_catalogue, prog=catalogue.prog)


def list_algorithms(args: argparse.Namespace) -> int:
    from .. import registry
    from . import catalogue
    if args.markdown:
        print(catalogue.table())
        return 0
    rows = [(a.collective, a.name, a.family,
             "; ".join(c.description for c in a.requires) or "-", a.summary)
            for a in registry.algorithms()]
    for row in rows:
        print(f"{row[0]:<15} {row[1]:<20} {row[2]:<10} {row[3]:<25} {row[4]}")
    return 0


def write_catalogue(args: argparse.Namespace) -> int:
    from . import catalogue
    for path in catalogue.write(Path(args.out)):
        print(path)
    return 0

