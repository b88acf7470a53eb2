"""A tiny broadcast timed alone and right after the library's own broadcast of the same size.

Under Open MPI 5.0.11 (2 ranks, one node) `bench_comm.py`'s 8 B Bcast and Reduce cells took
18-141 us through hpccoll where 512 B took 3-4 us.  This script isolates that: rounds of
``--calls`` calls each, in turn, of MPI's own ``comm.Bcast``, ``hpccoll.Comm.Bcast`` and
``hpccoll.bcast`` on ``--count`` float32s (a Barrier before each loop, the slowest rank's time
per call); the two hpccoll variants are first timed alone (after 300 calls each of warm-up),
before any call of MPI's own.

What it found: the cost grew with ``--calls``, alone as much as after MPI's own calls (6-10
us at 3,000).  The root of a loop of broadcasts runs ahead and its 8 B messages queue, unexpected,
at the other ranks; every call probes for a revocation notice as it completes, and Open MPI's
probe walks every unexpected message of the communicator it is given (a C loop of
Isend/Irecv + ``MPI_Iprobe(MPI_ANY_SOURCE)``: 3.9 us per iteration at 2,000 iterations, 73-85
us at 20,000; MPICH 0.3 us).  Since commit c323ce7 the notices travel on a private
communicator of their own, whose queue is empty: hpccoll.bcast at 8 B takes 2.4-3.3 us at
3,000 and at 30,000 calls per loop (MPI's own 0.6-1.1 us).

Usage: mpiexec -n 2 python perf/interleave_check.py [--count 2] [--calls 3000] [--rounds 4]
"""

from __future__ import annotations

import argparse
import time
from typing import Callable

import numpy as np
from mpi4py import MPI

import hpccoll


def per_call(comm: MPI.Intracomm, run: Callable[[], None], calls: int) -> float:
    """Microseconds per call of ``run`` over ``calls`` calls, the slowest rank's."""
    comm.Barrier()
    start = time.perf_counter()
    for _ in range(calls):
        run()
    return comm.allreduce((time.perf_counter() - start) / calls * 1e6, op=MPI.MAX)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=2, help="float32 elements")
    parser.add_argument("--calls", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args()
    comm = MPI.COMM_WORLD
    wrapped = hpccoll.Comm(comm)
    buf = np.zeros(args.count, np.float32)
    variants = {"Comm.Bcast": lambda: wrapped.Bcast(buf, 0),
                "hpccoll.bcast": lambda: hpccoll.bcast(comm, buf, root=0)}
    for run in variants.values():       # warm-up: plans made, the compiled executor built
        per_call(comm, run, 300)
    alone = {name: per_call(comm, run, args.calls) for name, run in variants.items()}
    if comm.rank == 0:
        print(f"# {comm.size} ranks, {MPI.Get_library_version().splitlines()[0]}, "
              f"{buf.nbytes} B, {args.calls} calls per loop, us per call (slowest rank)")
        print("alone (before any MPI Bcast): " +
              ", ".join(f"{name} {us:.2f}" for name, us in alone.items()))
    for round_ in range(args.rounds):
        own = per_call(comm, lambda: comm.Bcast(buf, 0), args.calls)
        after = {name: per_call(comm, run, args.calls) for name, run in variants.items()}
        if comm.rank == 0:
            print(f"round {round_}: MPI Bcast {own:.2f}, then " +
                  ", ".join(f"{name} {us:.2f}" for name, us in after.items()))


if __name__ == "__main__":
    main()
