"""The ``hpccoll`` command: ``bench``, ``verify``, ``topology``, ``explain``, ``tune``,
``simulate``, ``report``, ``jobs``, ``list`` and ``catalogue``."""

from __future__ import annotations

import argparse
import os
import sys
import time

from ..sim.engine import SimulatorMissing
from . import bench_command, explain, listing, report, simulate, topology, tune, verify
from .arguments import Parser, UsageError
from .jobs import command as jobs_command

COMMANDS = (bench_command, verify, topology, explain, tune, simulate, report, jobs_command,
            listing)
# What a user can cause: bad values and names, unreadable files, no simulator installed
# (argparse's own errors are UsageError).  Anything else (a bug, a collective that timed out)
# keeps its traceback, on every rank that has it.
USER_ERRORS = (ValueError, TypeError, KeyError, OSError, SimulatorMissing)
# Where MPI launchers put the rank of the process they started.
RANK_VARIABLES = ("PMI_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "SLURM_PROCID")
LATE_EXIT_SECONDS = 1.0


def parser() -> Parser:
    """The ``hpccoll`` parser, each subcommand registered by its module."""
    parser = Parser(prog="hpccoll", description=__doc__)
    subparsers = parser.add_subparsers(dest="command", required=True)
    for command in COMMANDS:
        command.add_parser(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run ``hpccoll ARGV``; a user error is one line ``hpccoll SUBCOMMAND: error: ...`` on
    stderr (rank 0's only, under an MPI launcher) and exit status 2."""
    argv = sys.argv[1:] if argv is None else argv
    try:
        args = parser().parse_args(argv, argparse.Namespace(command_line=["hpccoll", *argv]))
    except UsageError as error:
        return _fail(error.prog, error.message)
    try:
        return args.handler(args)
    except USER_ERRORS as error:
        return _fail(args.prog, _message(error))


def _message(error: BaseException) -> str:
    if isinstance(error, OSError) and error.filename:
        return f"{error.filename}: {error.strerror}"
    if isinstance(error, KeyError):
        return f"{error} not found"
    return str(error)


def _fail(prog: str, message: str) -> int:
    if _launched_rank() == 0:
        print(f"{prog}: error: {' '.join(message.splitlines())}", file=sys.stderr)
    else:
        # the other ranks leave rank 0 time to report: a launcher that ends the job at the
        # first non-zero exit (Open MPI's) would otherwise kill rank 0 before it printed
        time.sleep(LATE_EXIT_SECONDS)
    return 2


def _launched_rank() -> int:
    """This process's rank as an MPI launcher (or srun) set it, 0 outside one."""
    for variable in RANK_VARIABLES:
        value = os.environ.get(variable, "")
        if value.isdigit():
            return int(value)
    return 0
