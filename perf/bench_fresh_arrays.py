"""A blocking ring allreduce on new arrays every call (what a loop that allocates its buffers
pays: a binding per call), 1 KiB and 1 MiB, median of 1,000 calls, three blocks:

    mpiexec -n 2 python perf/bench_fresh_arrays.py
"""
import time, numpy as np, hpccoll
from mpi4py import MPI
comm = MPI.COMM_WORLD
def run(n, reps):
    ts = []
    for _ in range(reps):
        s = np.ones(n, np.float32); r = np.empty(n, np.float32)
        comm.Barrier(); t = time.perf_counter()
        hpccoll.allreduce(comm, s, r, algorithm="ring")
        ts.append(time.perf_counter() - t)
    return np.median(ts) * 1e6
for n in (256, 262144):
    run(n, 200)
    v = [run(n, 1000) for _ in range(3)]
    if comm.rank == 0: print(n * 4, "B fresh arrays each call, ring: median us", ["%.1f" % x for x in v])
