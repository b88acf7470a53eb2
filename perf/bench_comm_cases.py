"""Single ``hpccoll.Comm`` calls that took a slow path, against the same calls on plain
mpi4py, in one process: a spec of no element (an OSU loop's 0 bytes), an OSU loop's
``[buf, 8, MPI.BYTE]`` spec over its largest buffer, Allgatherv with a ``[buf, counts]`` spec
covering the whole buffer, and calls that hpccoll hands to MPI's own Allreduce (MPI.BOR on
MPI.BYTE specs; a user-defined op).  Each cell: ``--rounds`` rounds of ``--calls`` calls, mpi4py and Comm
taking turns, the median (and Comm's range); the slowest rank counts.

Usage: mpiexec -n 1 python perf/bench_comm_cases.py [--calls 40000] [--rounds 7]
"""

from __future__ import annotations

import argparse
import statistics

import numpy as np
from mpi4py import MPI

import hpccoll
from bench_percall import loop_time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=40000)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    plain = MPI.COMM_WORLD
    wrapped = hpccoll.Comm(plain)
    p = plain.Get_size()
    x, y = np.ones(2, np.float32), np.zeros(2 * p, np.float32)
    z = np.ones(2, np.float32)
    osu = np.zeros(1 << 20, np.uint8)          # an OSU loop's buffer, of the largest size
    counts = [2] * p
    gathered = [y, counts]
    user_op = MPI.Op.Create(lambda a, b, datatype: None, commute=True)
    cases = {
        "Allgatherv(x, [y, counts])": lambda comm: comm.Allgatherv(x, gathered),
        "Bcast([z, 0, MPI.BYTE], 0)": lambda comm: comm.Bcast([z, 0, MPI.BYTE], 0),
        "Bcast([osu, 8, MPI.BYTE], 0)": lambda comm: comm.Bcast([osu, 8, MPI.BYTE], 0),
        "Allreduce([osu, 8, BYTE], BOR)": lambda comm: comm.Allreduce([osu, 8, MPI.BYTE],
                                                               [y, 8, MPI.BYTE], op=MPI.BOR),
        "Allreduce(x, y[:2], user op)": lambda comm: comm.Allreduce(x, y[:2], op=user_op),
    }
    if plain.rank == 0:
        print(f"# {p} rank(s), {MPI.Get_library_version().splitlines()[0]}; "
              f"{args.rounds} rounds of {args.calls} calls, median")
    for name, call in cases.items():
        mine, theirs = [], []
        for _ in range(args.rounds):
            theirs.append(loop_time(plain, lambda: call(plain), args.calls) * 1e6)
            mine.append(loop_time(plain, lambda: call(wrapped), args.calls) * 1e6)
        if plain.rank == 0:
            print(f"{name:30s} mpi4py {statistics.median(theirs):6.2f} us  Comm "
                  f"{statistics.median(mine):6.2f} us ({min(mine):.2f}-{max(mine):.2f})  "
                  f"vs mpi4py {statistics.median(theirs) / statistics.median(mine):.2f}x")
    user_op.Free()


if __name__ == "__main__":
    main()
