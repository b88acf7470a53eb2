"""``hpccoll list`` and ``hpccoll catalogue``: the registered algorithms, as a table on the
terminal or as the catalogue's pages (:mod:`hpccoll.tools.catalogue`)."""

from __future__ import annotations

import argparse
import shutil
import textwrap
from pathlib import Path
from typing import Any

from .arguments import MATPLOTLIB_MISSING, have_matplotlib

# the table's width where the output is not a terminal (and COLUMNS is unset)
DEFAULT_WIDTH = 100
# the narrowest description column beside the names; on a narrower terminal each
# description goes under its row, indented by DESCRIPTION_INDENT
MIN_DESCRIPTION_WIDTH = 40
DESCRIPTION_INDENT = 4
HEADER = ("COLLECTIVE", "ALGORITHM", "FAMILY", "DESCRIPTION")


def add_parser(subparsers: Any) -> None:
    """``hpccoll list`` and ``hpccoll catalogue`` on the ``hpccoll`` parser's subparsers."""
    listing = subparsers.add_parser("list", help="the registered algorithms, native included")
    listing.add_argument("--markdown", action="store_true",
                         help="as the catalogue's markdown table (registered ones only)")
    listing.set_defaults(handler=list_algorithms, prog=listing.prog)
    catalogue = subparsers.add_parser(
        "catalogue", help="write the algorithm catalogue (table, one page and schedule "
                          "pictures per family; needs matplotlib)")
    catalogue.add_argument("--out", required=True, metavar="DIR",
                           help="the directory to write (created if missing; files of the "
                                "same names in it are replaced): no default, so that no run "
                                "overwrites a catalogue by accident; the repository's is "
                                "algorithms/")
    catalogue.set_defaults(handler=write_catalogue, prog=catalogue.prog)


def list_algorithms(args: argparse.Namespace) -> int:
    from . import catalogue
    if args.markdown:
        print(catalogue.table())
        return 0
    print(terminal_table(shutil.get_terminal_size((DEFAULT_WIDTH, 24)).columns))
    return 0


def rows() -> list[tuple[str, str, str, str]]:
    """(collective, algorithm, family, description) of every algorithm a call may name:
    per collective, the MPI library's own collective (native) first; a description is the
    first paragraph of the planner's docstring and the conditions the algorithm needs."""
    import inspect

    from .. import registry
    from ..collectives import SPECS
    found = []
    for name, spec in SPECS.items():
        found.append((name, registry.NATIVE, "-",
                      f"The MPI library's own collective (mpi4py's comm.{spec.mpi_name})."))
        for a in registry.algorithms(name):
            paragraph = " ".join((inspect.getdoc(a.planner) or "").split("\n\n")[0].split())
            requires = "; ".join(c.description for c in a.requires)
            found.append((name, a.name, a.family,
                          paragraph + (f" Requires: {requires}." if requires else "")))
    return found


def terminal_table(width: int) -> str:
    """:func:`rows` under a header, in ``width`` columns: each description wrapped at word
    boundaries in a column beside the names, or under its row where that column would be
    narrower than MIN_DESCRIPTION_WIDTH."""
    table = [HEADER, *rows()]
    widths = [max(len(row[column]) for row in table) for column in range(3)]
    names_width = sum(widths) + 2
    beside = width - names_width - 1 >= MIN_DESCRIPTION_WIDTH
    indent = names_width + 1 if beside else DESCRIPTION_INDENT
    wrap = textwrap.TextWrapper(width=width - indent, break_long_words=False,
                                break_on_hyphens=False)
    lines = []
    for row in table:
        names = " ".join(f"{cell:<{w}}" for cell, w in zip(row, widths))
        description = wrap.wrap(row[3])
        if beside:
            lines.append(f"{names} {description[0]}")
            description = description[1:]
        else:
            lines.append(names.rstrip())
        lines += [" " * indent + line for line in description]
    return "\n".join(lines)


def write_catalogue(args: argparse.Namespace) -> int:
    from . import catalogue
    if not have_matplotlib():            # before anything is written
        raise ValueError(f"the catalogue's schedule pictures {MATPLOTLIB_MISSING}")
    for path in catalogue.write(Path(args.out)):
        print(path)
    return 0
