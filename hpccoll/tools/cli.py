"""The ``hpccoll`` command: ``bench``, ``verify``, ``topology``, ``explain``, ``tune``,
``simulate``, ``report``, ``jobs``, ``list`` and ``catalogue``."""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time

from .. import __version__, settings
from ..sim.engine import SimulatorMissing
from . import bench_command, explain, listing, report, simulate, topology, tune, verify
from .arguments import Parser, UsageError, check_sizes_of
from .jobs import command as jobs_command
from .launcher import NO_MPI_LIBRARY, is_missing_library, reporting_rank

COMMANDS = (bench_command, verify, topology, explain, tune, simulate, report, jobs_command,
            listing)
# What a user can cause: bad values and names, unreadable files, no simulator installed
# (argparse's own errors are UsageError).  Anything else (a bug, a collective that timed out)
# keeps its traceback, on every rank that has it.
USER_ERRORS = (ValueError, TypeError, KeyError, OSError, SimulatorMissing)
LATE_EXIT_SECONDS = 1.0
# the exit status of a command whose reader closed its output (``hpccoll list | head``): a
# process ended by SIGPIPE's, as the shell reports it
CLOSED_OUTPUT_STATUS = 128 + signal.SIGPIPE


def parser() -> Parser:
    """The ``hpccoll`` parser, each subcommand registered by its module."""
    parser = Parser(prog="hpccoll", description=__doc__)
    parser.add_argument("--version", action="version", version=f"hpccoll {__version__}")
    subparsers = parser.add_subparsers(dest="command", required=True)
    for command in COMMANDS:
        command.add_parser(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run ``hpccoll ARGV``; a user error is one line ``hpccoll SUBCOMMAND: error: ...`` on
    stderr (rank 0's only, under an MPI launcher) and exit status 2.  A command that runs or
    explains collectives (``reads_environment``) first checks every ``HPCCOLL_*`` variable,
    so that a bad one is that line, not a failure of its first call; a reader that closes
    the output early ends the command quietly."""
    argv = sys.argv[1:] if argv is None else argv
    try:
        args = parser().parse_args(argv, argparse.Namespace(command_line=["hpccoll", *argv]))
        check_sizes_of(args)
    except UsageError as error:
        return _fail(error.prog, error.message)
    try:
        if getattr(args, "reads_environment", False):
            settings.check_environment()
        status = args.handler(args)
        sys.stdout.flush()          # a closed reader is found here, not at the exit
        return status
    except BrokenPipeError:
        return _closed_output()
    except USER_ERRORS as error:
        return _fail(args.prog, _message(error))
    except RuntimeError as error:
        if not is_missing_library(error):
            raise
        return _fail(args.prog, NO_MPI_LIBRARY)


def _message(error: BaseException) -> str:
    if isinstance(error, OSError) and error.filename:
        return f"{error.filename}: {error.strerror}"
    if isinstance(error, KeyError):
        return f"{error} not found"
    return str(error)


def _fail(prog: str, message: str) -> int:
    if reporting_rank():
        print(f"{prog}: error: {' '.join(message.splitlines())}", file=sys.stderr)
    else:
        # the other ranks leave rank 0 time to report: a launcher that ends the job at the
        # first non-zero exit (Open MPI's) would otherwise kill rank 0 before it printed
        time.sleep(LATE_EXIT_SECONDS)
    return 2


def _closed_output() -> int:
    """The output's reader is gone: what is still buffered goes nowhere (Python's flush at
    exit would otherwise report the broken pipe), and the command ends without a word."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return CLOSED_OUTPUT_STATUS
