"""Per-call cost of small collectives: mpi4py's own call against hpccoll's, in one run.

Each cell is a tight loop of blocking calls on the same arrays (as a training loop makes them),
timed on every rank (the slowest rank counts).  A cell's call count is chosen once so that its
loop lasts about ``--seconds`` (at least 20 calls); the variants of a size take turns, the
whole round ``--repeat`` times, and each cell is the median.  ``native`` is
``comm.Allreduce`` etc. through mpi4py, ``native-nonblocking`` its non-blocking form
(``comm.Iallreduce(...).Wait()``: what hpccoll's native executor posts, so that a deadline
can be kept); ``auto``, ``hpccoll-native`` and the scheduled algorithms go through hpccoll's
API, ``<algorithm>/persistent`` (``hpccoll-native/persistent`` too) through
``<collective>_init`` (``start()`` then ``wait()`` per call), ``native-persistent`` is
mpi4py's own persistent collective (MPI-4: ``comm.Allreduce_init``, ``Start()`` then
``Wait()``); ``vs native`` = native time / time (above 1: faster than mpi4py).
Sizes in the OSU convention (allreduce, bcast and reduce: the vector; allgather and
alltoall(v): one rank's block; reduce_scatter: the whole vector), float32 sums; bcast and
reduce to rank 0, whose non-root ranks pass hpccoll no receive buffer.

Usage: mpiexec -n 2 python perf/bench_percall.py [--sizes 8,64,512,4K,64K] [--seconds 0.1]
       [--repeat 5] [--collectives allreduce,allgather,alltoall,alltoallv,reduce_scatter,
       bcast,reduce]
       [--algorithms ring,bruck,...] [--no-persistent]
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Callable

import numpy as np
from mpi4py import MPI

import hpccoll
from hpccoll import registry
from hpccoll.collectives import nonblocking, uniform_call
from hpccoll.tools.bench import library_version
from hpccoll.tools.results import parse_size

COLLECTIVES = ("allreduce", "allgather", "alltoall", "alltoallv", "reduce_scatter", "bcast",
               "reduce")
OWN_PERSISTENT: list[MPI.Prequest] = []    # mpi4py's persistent requests, freed at the end
SCHEDULED = {"allreduce": ("ring", "recursive_doubling", "direct"),
             "allgather": ("ring", "recursive_doubling", "direct"),
             "alltoall": ("bruck", "hypercube", "pairwise", "direct"),
             "alltoallv": ("direct", "pairwise", "xor"),
             "reduce_scatter": ("ring", "recursive_halving", "direct"),
             "bcast": ("binomial", "chain", "bine"),
             "reduce": ("binomial", "chain", "bine")}
# mpi4py's method each collective is timed against (reduce_scatter: the even split)
NATIVE_CALLS = {"allreduce": "Allreduce", "allgather": "Allgather", "alltoall": "Alltoall",
                "alltoallv": "Alltoallv", "reduce_scatter": "Reduce_scatter_block",
                "bcast": "Bcast", "reduce": "Reduce"}


def method_arguments(method: str, p: int, rank: int, nbytes: int
                     ) -> tuple[tuple, str, tuple, dict]:
    """(mpi4py's arguments, the hpccoll function's name, its arguments after comm, its
    keywords) for a ``nbytes`` call (OSU convention: allreduce/reduce/bcast the vector,
    allgather(v)/alltoall(v) one rank's block, reduce_scatter the whole vector)."""
    n = max(1, nbytes // 4)
    f32 = np.float32
    if method in ("Allgather", "Allgatherv"):
        send, recv = np.ones(n, f32), np.zeros(n * p, f32)
        if method == "Allgather":
            return (send, recv), "allgather", (send, recv), {}
        counts = [n] * p
        return (send, [recv, counts]), "allgather", (send, recv), {"recvcounts": counts}
    if method in ("Alltoall", "Alltoallv"):
        send, recv = np.ones(n * p, f32), np.zeros(n * p, f32)
        if method == "Alltoall":
            return (send, recv), "alltoall", (send, recv), {}
        counts = [n] * p
        return ([send, counts], [recv, counts]), "alltoallv", \
            ([send, counts], [recv, counts]), {}
    if method in ("Reduce_scatter_block", "Reduce_scatter"):
        block = max(1, n // p)
        send, recv = np.ones(block * p, f32), np.zeros(block, f32)
        if method == "Reduce_scatter_block":
            return (send, recv, MPI.SUM), "reduce_scatter", (send, recv), {}
        counts = [block] * p
        return (send, recv, counts, MPI.SUM), "reduce_scatter", (send, recv), \
            {"recvcounts": counts}
    if method == "Allreduce":
        send, recv = np.ones(n, f32), np.zeros(n, f32)
        return (send, recv, MPI.SUM), "allreduce", (send, recv), {}
    if method == "Bcast":
        buf = np.ones(n, f32)
        return (buf, 0), "bcast", (buf,), {"root": 0}
    send, recv = np.ones(n, f32), np.zeros(n, f32)
    return (send, recv, MPI.SUM, 0), "reduce", (send, recv if rank == 0 else None), \
        {"root": 0}



def variants(comm: MPI.Intracomm, collective: str, nbytes: int, algorithms: tuple[str, ...],
             persistent: bool) -> dict[str, Callable[[], None]]:
    """name -> one call of ``collective`` on ``nbytes`` (:func:`method_arguments`), for the
    variants that apply to this call."""
    method = NATIVE_CALLS[collective]
    native_arguments, function, arguments, keywords = \
        method_arguments(method, comm.size, comm.rank, nbytes)
    native = getattr(comm, method)
    start_native = getattr(comm, nonblocking(method))
    blocking = getattr(hpccoll, function)
    init = getattr(hpccoll, function + "_init")
    out = {"native": lambda: native(*native_arguments),
           "native-nonblocking": lambda: start_native(*native_arguments).Wait()}
    if persistent:          # mpi4py's persistent collective (MPI-4), started and waited for
        own = getattr(comm, method + "_init")(*native_arguments)
        OWN_PERSISTENT.append(own)
        out["native-persistent"] = lambda: (own.Start(), own.Wait())
    call = uniform_call(collective, comm.size, comm.rank, 1)
    applies = {a.name for a in registry.algorithms(collective) if a.violated(call) is None}
    for name in ("auto", "native", *algorithms):
        if name not in ("auto", "native") and name not in applies:
            continue
        label = "hpccoll-native" if name == "native" else name
        out[label] = lambda name=name: blocking(comm, *arguments, algorithm=name, **keywords)
        if persistent and name != "auto":
            request = init(comm, *arguments, algorithm=name, **keywords)
            out[f"{label}/persistent"] = lambda request=request: (request.start(),
                                                                  request.wait())
    return out


def calls_for(comm: MPI.Intracomm, run: Callable[[], None], seconds: float) -> int:
    """How many calls of ``run`` last about ``seconds`` on the slowest rank (after warming up:
    plans made, the compiled executor built)."""
    loop_time(comm, run, 10)                    # warm-up: not counted
    calls = 10
    while True:
        per_call = loop_time(comm, run, calls)
        if per_call * calls >= seconds / 10 or calls >= 1 << 20:
            return max(20, int(seconds / per_call))
        calls *= 4


def loop_time(comm: MPI.Intracomm, run: Callable[[], None], calls: int) -> float:
    """Seconds per call over ``calls`` calls, the slowest rank's."""
    comm.Barrier()
    start = time.perf_counter()
    for _ in range(calls):
        run()
    mine = (time.perf_counter() - start) / calls
    return comm.allreduce(mine, op=MPI.MAX)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="8,64,512,4K,64K",
                        help="comma-separated sizes in bytes (K/M suffixes)")
    parser.add_argument("--seconds", type=float, default=0.1, help="per cell and round")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--collectives", default=",".join(COLLECTIVES),
                        help="comma-separated (default: all seven)")
    parser.add_argument("--algorithms", default=None,
                        help="comma-separated scheduled algorithms (default: per collective "
                             + "; ".join(f"{c}: {','.join(a)}" for c, a in SCHEDULED.items())
                             + ")")
    parser.add_argument("--no-persistent", dest="persistent", action="store_false",
                        help="leave out the persistent forms")
    args = parser.parse_args()
    comm = MPI.COMM_WORLD
    p = comm.size
    sizes = [parse_size(s) for s in args.sizes.split(",")]
    if comm.rank == 0:
        print(f"# {p} rank(s), {library_version()}; "
              f"median of {args.repeat} rounds of ~{args.seconds} s per cell; "
              f"vs native = native time / time")
        print(f"{'collective':<15} {'bytes':>8} {'calls':>7} {'variant':<30} "
              f"{'us/call':>9} {'vs native':>9}")
    summary = []
    for collective in args.collectives.split(","):
        algorithms = tuple(args.algorithms.split(",")) if args.algorithms else \
            SCHEDULED[collective]
        for nbytes in sizes:
            runs = variants(comm, collective, nbytes, algorithms, args.persistent)
            calls = {name: calls_for(comm, run, args.seconds) for name, run in runs.items()}
            samples: dict[str, list[float]] = {name: [] for name in runs}
            for _ in range(args.repeat):
                for name, run in runs.items():
                    samples[name].append(loop_time(comm, run, calls[name]))
            medians = {name: statistics.median(times) for name, times in samples.items()}
            summary.append((collective, nbytes, medians))
            for name, t in medians.items():
                if comm.rank == 0:
                    print(f"{collective:<15} {nbytes:>8} {calls[name]:>7} {name:<30} "
                          f"{t * 1e6:9.2f} {medians['native'] / t:8.2f}x", flush=True)
    for request in OWN_PERSISTENT:
        request.Free()
    if comm.rank == 0:
        print_summary(summary)


def print_summary(cells: list[tuple[str, int, dict[str, float]]]) -> None:
    """The cells as one Markdown table: mpi4py's time, then each variant as mpi4py's time /
    its time -- ``auto``, ``hpccoll-native``, the fastest scheduled algorithm blocking (its
    name), the fastest scheduled persistent one, mpi4py's own persistent collective (MPI-4)
    and hpccoll-native's persistent one."""
    print("\n| collective | bytes | mpi4py us | nonblocking | auto | hpccoll-native "
          "| best scheduled | best persistent | mpi4py persistent | hpccoll-native persistent |"
          "\n|---|---:|---:|---:|---:|---:|---|---:|---:|---:|")
    for collective, nbytes, medians in cells:
        native = medians["native"]
        scheduled = {n: t for n, t in medians.items() if "/" not in n and n not in
                     ("native", "native-nonblocking", "native-persistent", "auto",
                      "hpccoll-native")}
        persistent = [t for n, t in medians.items() if n.endswith("/persistent")
                      and not n.startswith("hpccoll-native")]
        best = min(scheduled, key=scheduled.get) if scheduled else None
        print(f"| {collective} | {nbytes} | {native * 1e6:.2f} "
              f"| {native / medians['native-nonblocking']:.2f}x "
              f"| {native / medians['auto']:.2f}x | {native / medians['hpccoll-native']:.2f}x "
              f"| {f'{native / scheduled[best]:.2f}x {best}' if best else ''} "
              f"| {f'{native / min(persistent):.2f}x' if persistent else ''} "
              f"| {ratio(native, medians.get('native-persistent'))} "
              f"| {ratio(native, medians.get('hpccoll-native/persistent'))} |")


def ratio(reference: float, time: float | None) -> str:
    return "" if time is None else f"{reference / time:.2f}x"


if __name__ == "__main__":
    main()
