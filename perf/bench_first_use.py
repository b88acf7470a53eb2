"""What a call's first repeat costs where Numba's disk cache does not hold the compiled
executors yet (a fresh install, a new cluster's home directory): the second call of each
(collective, algorithm, dtype) on the same arrays runs on the compiled executor and compiles
what it needs first; the first call (the Python executor) and the third (compiled, cached in
this process) are shown beside it.  The slowest rank's time counts.  Run it twice with the
same ``NUMBA_CACHE_DIR``: the second run shows the cost of loading from the cache instead.

Usage: NUMBA_CACHE_DIR=$(mktemp -d) mpiexec -n 2 python perf/bench_first_use.py
           [--dtypes float64,float32,int32] [--algorithms ring,native]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from mpi4py import MPI

import hpccoll


def slowest(comm: MPI.Comm, call) -> float:
    """Seconds of ``call()`` on the slowest rank, started together."""
    comm.Barrier()
    start = time.perf_counter()
    call()
    return comm.allreduce(time.perf_counter() - start, op=MPI.MAX)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dtypes", default="float64,float32,int32")
    parser.add_argument("--algorithms", default="ring,native")
    args = parser.parse_args()
    comm = MPI.COMM_WORLD
    p = comm.Get_size()
    if comm.rank == 0:
        print(f"# {p} ranks, {MPI.Get_library_version().splitlines()[0].strip()}; seconds "
              "(slowest rank) of a call's first, second (compiles in a fresh cache) and "
              "third run on the same arrays")
        print(f"{'collective':10s} {'algorithm':10s} {'dtype':8s} {'first':>8s} {'second':>8s} "
              f"{'third':>8s}")
    for algorithm in args.algorithms.split(","):
        for dtype in args.dtypes.split(","):
            for collective in ("allgather", "allreduce"):
                send = np.ones(64, dtype)
                recv = np.zeros(64 * (p if collective == "allgather" else 1), dtype)
                run = getattr(hpccoll, collective)
                times = [slowest(comm, lambda: run(comm, send, recv, algorithm=algorithm))
                         for _ in range(3)]
                if comm.rank == 0:
                    print(f"{collective:10s} {algorithm:10s} {dtype:8s} "
                          + " ".join(f"{t:8.3f}" for t in times), flush=True)


if __name__ == "__main__":
    main()
