"""The drop-in communicator's cost: an mpi4py program's calls on ``hpccoll.Comm`` against the
same calls on plain mpi4py, and against the hpccoll function ``Comm`` calls, in one run.

Two parts, timed as perf/bench_percall.py times (a tight loop per cell lasting about
``--seconds``, the variants of a cell taking turns, ``--repeat`` rounds, the median; the
slowest rank counts):

* ``methods``: every overridden method (blocking, ``I...`` + ``Wait()``, ``..._init`` with
  ``Start()`` + ``Wait()``) on float32 arrays passed as they are, three variants per cell:
  ``mpi4py`` (``MPI.Intracomm``'s method), ``Comm`` (the same method of ``hpccoll.Comm``),
  ``function`` (the hpccoll function ``Comm`` runs: ``hpccoll.allreduce``, ``iallreduce``,
  ``allreduce_init``, ...).  ``vs mpi4py`` = mpi4py's time / Comm's; ``over function`` =
  Comm's time - the function's, in microseconds.
* ``osu``: an OSU-style client loop, unchanged but for the communicator: per size a new
  ``[buf, size, MPI.BYTE]`` spec for every call on one large byte buffer (bcast, IN_PLACE
  allgather, alltoall), float32 ``Allreduce``, ``Reduce`` to rank 0 and
  ``Reduce_scatter_block`` on ``[buf, count, MPI.FLOAT]``; ``vs mpi4py`` as above.

Usage: mpiexec -n 2 python perf/bench_comm.py [--part methods,osu] [--sizes 8,64,512,4K,64K]
       [--osu-sizes 1,8,64,512,4K,64K,1M] [--seconds 0.05] [--repeat 5]
       [--methods Allreduce,Bcast,...] [--forms blocking,nonblocking,persistent]
       [--algorithm auto]
"""

from __future__ import annotations

import argparse
import statistics
from typing import Callable

import numpy as np
from mpi4py import MPI

import hpccoll
from bench_percall import calls_for, loop_time, method_arguments
from hpccoll.tools.bench import library_version
from hpccoll.tools.results import parse_size

FORMS = ("blocking", "nonblocking", "persistent")
METHODS = ("Allgather", "Allgatherv", "Alltoall", "Alltoallv", "Reduce_scatter_block",
           "Reduce_scatter", "Allreduce", "Bcast", "Reduce")


REQUESTS: list = []         # the persistent requests made, freed at the end


def form_call(comm: MPI.Comm, method: str, form: str, arguments: tuple
              ) -> Callable[[], None]:
    """One call of ``method`` in ``form`` on ``comm`` (the persistent request made once)."""
    if form == "blocking":
        call = getattr(comm, method)
        return lambda: call(*arguments)
    if form == "nonblocking":
        start = getattr(comm, "I" + method[0].lower() + method[1:])
        return lambda: start(*arguments).Wait()
    request = getattr(comm, method + "_init")(*arguments)
    REQUESTS.append(request)
    return lambda: (request.Start(), request.Wait())


def function_call(comm: MPI.Comm, name: str, form: str, arguments: tuple, keywords: dict
                  ) -> Callable[[], None]:
    """One call of hpccoll's function ``name`` in ``form`` (what ``Comm`` runs)."""
    if form == "blocking":
        call = getattr(hpccoll, name)
        return lambda: call(comm, *arguments, **keywords)
    if form == "nonblocking":
        start = getattr(hpccoll, "i" + name)
        return lambda: start(comm, *arguments, **keywords).wait()
    request = getattr(hpccoll, name + "_init")(comm, *arguments, **keywords)
    REQUESTS.append(request)
    return lambda: (request.start(), request.wait())


def timed(comm: MPI.Comm, runs: dict[str, Callable[[], None]], seconds: float,
          repeat: int) -> dict[str, float]:
    """name -> median seconds per call, the variants taking turns."""
    calls = {name: calls_for(comm, run, seconds) for name, run in runs.items()}
    samples: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(repeat):
        for name, run in runs.items():
            samples[name].append(loop_time(comm, run, calls[name]))
    return {name: statistics.median(times) for name, times in samples.items()}


def methods_part(comm: MPI.Intracomm, wrapped: hpccoll.Comm, args: argparse.Namespace
                 ) -> None:
    p, rank = comm.size, comm.rank
    if rank == 0:
        print(f"{'method':<22} {'form':<12} {'bytes':>7} {'mpi4py us':>10} {'Comm us':>9} "
              f"{'function us':>12} {'vs mpi4py':>10} {'over function':>14}")
    for method in args.methods.split(","):
        for form in args.forms.split(","):
            for nbytes in (parse_size(s) for s in args.sizes.split(",")):
                arguments, name, function_args, keywords = \
                    method_arguments(method, p, rank, nbytes)
                keywords = {**keywords, "algorithm": args.algorithm}
                runs = {"mpi4py": form_call(comm, method, form, arguments),
                        "Comm": form_call(wrapped, method, form, arguments),
                        "function": function_call(comm, name, form, function_args,
                                                  keywords)}
                t = timed(comm, runs, args.seconds, args.repeat)
                if rank == 0:
                    print(f"{method:<22} {form:<12} {nbytes:>7} {t['mpi4py'] * 1e6:10.2f} "
                          f"{t['Comm'] * 1e6:9.2f} {t['function'] * 1e6:12.2f} "
                          f"{t['mpi4py'] / t['Comm']:9.2f}x "
                          f"{(t['Comm'] - t['function']) * 1e6:+13.2f}", flush=True)


def osu_loop(comm: MPI.Comm, test: str, size: int, buf: np.ndarray, out: np.ndarray
             ) -> Callable[[], None]:
    """One call of an OSU-style ``test`` of ``size`` bytes on ``comm``, as a client writes it:
    a new buffer spec every call."""
    p, byte, f32 = comm.Get_size(), MPI.BYTE, MPI.FLOAT
    count = max(1, size // 4)
    if test == "bcast":
        return lambda: comm.Bcast([buf, size, byte], root=0)
    if test == "allgather_in_place":
        return lambda: comm.Allgather(MPI.IN_PLACE, [out, size, byte])
    if test == "alltoall":
        return lambda: comm.Alltoall([buf, size, byte], [out, size, byte])
    floats, results = buf.view(np.float32), out.view(np.float32)
    if test == "allreduce":
        return lambda: comm.Allreduce([floats, count, f32], [results, count, f32], op=MPI.SUM)
    if test == "reduce":
        return lambda: comm.Reduce([floats, count, f32], [results, count, f32], op=MPI.SUM,
                                   root=0)
    block = max(1, count // p)
    return lambda: comm.Reduce_scatter_block([floats[:block * p], f32],
                                             [results[:block], f32], op=MPI.SUM)


OSU_TESTS = ("bcast", "allgather_in_place", "alltoall", "allreduce", "reduce",
             "reduce_scatter_block")


def osu_part(comm: MPI.Intracomm, wrapped: hpccoll.Comm, args: argparse.Namespace) -> None:
    p = comm.size
    sizes = [parse_size(s) for s in args.osu_sizes.split(",")]
    room = max(sizes) * p + 64
    buf = np.zeros(room, np.uint8)
    out = np.zeros(room, np.uint8)
    if comm.rank == 0:
        print(f"{'osu test':<22} {'bytes':>8} {'mpi4py us':>10} {'Comm us':>9} "
              f"{'vs mpi4py':>10}")
    for test in OSU_TESTS:
        for size in sizes:
            runs = {"mpi4py": osu_loop(comm, test, size, buf, out),
                    "Comm": osu_loop(wrapped, test, size, buf, out)}
            t = timed(comm, runs, args.seconds, args.repeat)
            if comm.rank == 0:
                print(f"{test:<22} {size:>8} {t['mpi4py'] * 1e6:10.2f} {t['Comm'] * 1e6:9.2f} "
                      f"{t['mpi4py'] / t['Comm']:9.2f}x", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--part", default="methods,osu")
    parser.add_argument("--sizes", default="8,64,512,4K,64K",
                        help="sizes of the methods part (bytes, K/M suffixes)")
    parser.add_argument("--osu-sizes", default="1,8,64,512,4K,64K,1M")
    parser.add_argument("--seconds", type=float, default=0.05, help="per cell and round")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--methods", default=",".join(METHODS))
    parser.add_argument("--forms", default=",".join(FORMS))
    parser.add_argument("--algorithm", default="auto",
                        help="the algorithm of every collective, Comm's and the functions'")
    args = parser.parse_args()
    comm = MPI.COMM_WORLD
    collectives = {method_arguments(method, comm.size, comm.rank, 8)[1]
                   for method in args.methods.split(",")}
    wrapped = hpccoll.Comm(comm, dict.fromkeys(collectives, args.algorithm))
    if comm.rank == 0:
        print(f"# {comm.size} rank(s), {library_version()}; algorithm {args.algorithm}; median "
              f"of {args.repeat} rounds of ~{args.seconds} s per cell; vs mpi4py = mpi4py's "
              "time / Comm's time")
    parts = args.part.split(",")
    if "methods" in parts:
        methods_part(comm, wrapped, args)
    if "osu" in parts:
        osu_part(comm, wrapped, args)
    for request in REQUESTS:
        (request.Free if hasattr(request, "Free") else request.free)()


if __name__ == "__main__":
    main()
