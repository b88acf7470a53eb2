"""``hpccoll topology``: the detected (or ``HPCCOLL_TOPOLOGY``) topology of MPI_COMM_WORLD."""

from __future__ import annotations

import argparse
import json
from typing import Any


def add_parser(subparsers: Any) -> None:
    """``hpccoll topology`` on the ``hpccoll`` parser's subparsers."""
    parser = subparsers.add_parser("topology", help="print the detected (or HPCCOLL_TOPOLOGY) "
                                                    "topology of MPI_COMM_WORLD (run under "
                                                    "mpiexec/srun)")
    parser.add_argument("--json", action="store_true", help="one region id per rank and level")
    parser.set_defaults(handler=run, prog=parser.prog, reads_environment=True)


def run(args: argparse.Namespace) -> int:
    from mpi4py import MPI

    from ..context import get_topology
    comm = MPI.COMM_WORLD
    found = get_topology(comm)
    names = comm.gather(MPI.Get_processor_name())
    if comm.rank == 0:
        if args.json:
            print(json.dumps(dict(zip(found.levels, map(list, found.regions)))))
        else:
            print(found.describe())
            for rank, host in enumerate(names):
                where = ", ".join(f"{name} {found.regions[l][rank]}"
                                  for l, name in enumerate(found.levels))
                print(f"rank {rank:>4}  {host:<20} {where}")
    return 0
