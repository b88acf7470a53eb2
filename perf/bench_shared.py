"""Zero-copy shared-result collectives against the native ones (the SW-IntraCC paper's three-tier idea).

``SharedAllgather.run()`` leaves the gathered result in the node's shared segment (one copy
per node, read in place), ``SharedAllreduce.run()`` likewise for the reduced vector; the
native collectives copy the result into every rank's private buffer.  The producer's write
into ``.local`` (before every run: ``.local`` is the next run's slot) is outside the timed
region, as native's producer filling its private send array is.  Time: median over
iterations of the slowest rank, each iteration after a barrier, OSU sizes (allgather: the
block per rank; allreduce: the vector).

Every variant of a size gets at least ``-i`` iterations and at least ``--min-time`` seconds of
them (``hpccoll bench``'s rule, :mod:`hpccoll.tools.timing`).

Usage: mpiexec -n P python perf/bench_shared.py [-m 1K:64M] [-i 20] [--min-time 0.2] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np
from mpi4py import MPI

import hpccoll
from hpccoll.tools import timing
from hpccoll.tools.bench import time_runs
from hpccoll.tools.results import size_range


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("-m", "--sizes", default="1K:64M")
    parser.add_argument("-i", "--iterations", type=int, default=timing.MIN_ITERATIONS)
    parser.add_argument("--min-time", type=float, default=timing.MIN_TIME)
    parser.add_argument("--json")
    args = parser.parse_args()
    comm = MPI.COMM_WORLD

    def timed(run, before=lambda: None) -> float:
        """Median of the slowest rank's time of ``run``; ``before`` (untimed) precedes each."""
        timing, = time_runs(comm, [run], args.iterations, 3, before, args.min_time)
        return timing.median_us

    p, rank = comm.size, comm.rank
    rows = []
    say = print if rank == 0 else (lambda *a, **k: None)
    say(f"# `mpiexec -n {p} python {' '.join(sys.argv)}`")
    say("| collective | size | native (us) | csc (us) | shared zero-copy (us) | csc vs native "
        "| zero-copy vs native | wrong |")
    say("|---|---:|---:|---:|---:|---:|---:|---:|")
    for size in size_range(args.sizes):
        n = size // 4
        block = np.full(n, rank + 1, np.float32)
        gathered = np.empty(n * p, np.float32)
        with hpccoll.SharedAllgather(comm, (n,), np.float32) as shared:
            def produce():
                shared.local[:] = block          # the producer's write, into the next run's slot
            t_native = timed(lambda: comm.Allgather(block, gathered))
            t_csc = timed(lambda: hpccoll.allgather(comm, block, gathered, algorithm="csc"))
            t_shared = timed(shared.run, before=produce)
            wrong = int(np.count_nonzero(shared.result != np.arange(1, p + 1)[:, None]))
        rows.append({"collective": "allgather", "bytes": size, "native_us": t_native,
                     "csc_us": t_csc, "shared_us": t_shared, "wrong": wrong})
        total = np.empty(n, np.float32)
        with hpccoll.SharedAllreduce(comm, (n,), np.float32) as shared:
            def produce_r():
                shared.local[:] = block
            t_native_r = timed(lambda: comm.Allreduce(block, total))
            t_csc_r = timed(lambda: hpccoll.allreduce(comm, block, total, algorithm="csc"))
            t_shared_r = timed(shared.run, before=produce_r)
            wrong_r = int(np.count_nonzero(shared.result != p * (p + 1) / 2))
        rows.append({"collective": "allreduce", "bytes": size, "native_us": t_native_r,
                     "csc_us": t_csc_r, "shared_us": t_shared_r, "wrong": wrong_r})
        for row in rows[-2:]:
            say(f"| {row['collective']} | {size} | {row['native_us']:.1f} | {row['csc_us']:.1f} "
                f"| {row['shared_us']:.1f} | {row['native_us'] / row['csc_us']:.2f}x | "
                f"{row['native_us'] / row['shared_us']:.2f}x | {row['wrong']} |")
    if args.json and rank == 0:
        with open(args.json, "w") as f:
            json.dump({"meta": {"ranks": p, "command": " ".join(sys.argv),
                                "date": time.strftime("%Y-%m-%d %H:%M")}, "results": rows},
                      f, indent=1)


if __name__ == "__main__":
    main()
