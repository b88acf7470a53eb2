"""Per-call cost of small collectives: mpi4py's own call against hpccoll's, in one run.

Each cell is a tight loop of ``--calls`` blocking calls on the same arrays (as a training loop
makes them), timed on every rank (the slowest rank counts); the variants take turns, the
whole round ``--repeat`` times, and each cell is the median.  ``native`` is ``comm.Allreduce``
etc. through mpi4py; ``auto``, ``hpccoll-native`` and the scheduled algorithms go through
hpccoll's API; ``vs native`` = native time / time (above 1: faster than mpi4py).  Sizes in
the OSU convention (allreduce: the vector; allgather and alltoall: one rank's block;
reduce_scatter: the whole vector).  ``--large`` adds 1 MiB calls to show what the fast path
costs where the transfer dominates.

Usage: mpiexec -n 2 python perf/bench_percall.py [--calls 20000] [--repeat 3] [--large]
       [--collectives allreduce,allgather,alltoall,reduce_scatter]
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Callable

import numpy as np
from mpi4py import MPI

import hpccoll

COLLECTIVES = ("allreduce", "allgather", "alltoall", "reduce_scatter")
SCHEDULED = ("ring", "recursive_doubling")


def buffers(collective: str, p: int, nbytes: int) -> tuple[np.ndarray, np.ndarray]:
    """float32 send and receive arrays of a ``nbytes`` call (OSU convention)."""
    n = max(1, nbytes // 4)
    if collective == "allreduce":
        sizes = (n, n)
    elif collective == "allgather":
        sizes = (n, n * p)
    elif collective == "alltoall":
        sizes = (n * p, n * p)
    else:
        n = max(1, n // p)
        sizes = (n * p, n)
    send = np.arange(sizes[0], dtype=np.float32)
    return send, np.zeros(sizes[1], np.float32)


def variants(comm: MPI.Intracomm, collective: str, send: np.ndarray, recv: np.ndarray
             ) -> dict[str, Callable[[], None]]:
    """name -> one call, for the variants that apply to this call."""
    from hpccoll import registry
    from hpccoll.collectives import uniform_call
    mine = {"allreduce": lambda: comm.Allreduce(send, recv),
            "allgather": lambda: comm.Allgather(send, recv),
            "alltoall": lambda: comm.Alltoall(send, recv),
            "reduce_scatter": lambda: comm.Reduce_scatter_block(send, recv)}
    function = getattr(hpccoll, collective)
    out = {"native": mine[collective]}
    call = uniform_call(collective, comm.size, comm.rank, 1)
    applies = {a.name for a in registry.algorithms(collective) if a.violated(call) is None}
    for name in ("auto", "native", *SCHEDULED):
        if name in ("auto", "native") or name in applies:
            label = "hpccoll-native" if name == "native" else name
            out[label] = lambda name=name: function(comm, send, recv, algorithm=name)
    return out


def loop_time(comm: MPI.Intracomm, run: Callable[[], None], calls: int) -> float:
    """Seconds per call over ``calls`` calls, the slowest rank's."""
    for _ in range(min(calls // 10, 500)):
        run()
    comm.Barrier()
    start = time.perf_counter()
    for _ in range(calls):
        run()
    mine = (time.perf_counter() - start) / calls
    return comm.allreduce(mine, op=MPI.MAX)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=20000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--large", action="store_true", help="also 1 MiB calls")
    parser.add_argument("--collectives", default=",".join(COLLECTIVES),
                        help="comma-separated (default: all four)")
    args = parser.parse_args()
    comm = MPI.COMM_WORLD
    p = comm.size
    collectives = args.collectives.split(",")
    cases = [(c, 8, args.calls) for c in collectives]
    if args.large:
        cases += [(c, 1 << 20, max(20, args.calls // 100)) for c in collectives]
    if comm.rank == 0:
        print(f"# {p} rank(s), {MPI.Get_library_version().splitlines()[0].strip()}; "
              f"median of {args.repeat} rounds; vs native = native time / time")
        print(f"{'collective':<15} {'bytes':>8} {'calls':>6} {'variant':<20} "
              f"{'us/call':>9} {'vs native':>9}")
    for collective, nbytes, calls in cases:
        send, recv = buffers(collective, p, nbytes)
        runs = variants(comm, collective, send, recv)
        samples: dict[str, list[float]] = {name: [] for name in runs}
        for _ in range(args.repeat):
            for name, run in runs.items():
                samples[name].append(loop_time(comm, run, calls))
        native = statistics.median(samples["native"])
        for name, times in samples.items():
            t = statistics.median(times)
            if comm.rank == 0:
                print(f"{collective:<15} {nbytes:>8} {calls:>6} {name:<20} {t * 1e6:9.2f} "
                      f"{native / t:8.2f}x")


if __name__ == "__main__":
    main()
