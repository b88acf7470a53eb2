"""A native persistent request of hpccoll (``hpccoll.<collective>_init(...,
algorithm="native")``, ``start()`` then ``wait()``) against mpi4py's blocking call on the same
arrays: allreduce, bcast, reduce and allgather at 8 B and 4 KiB, each cell the median of 7
rounds of ~0.1 s loops (the slowest rank's time), the two alternating.  Made to compare the
code before and after native persistent requests became the library's MPI-4 persistent
collectives (perf/percall.md), so it uses only the public API.

Usage: PYTHONPATH=<checkout> mpiexec -n 2 python perf/bench_native_persistent.py
"""
import time

import numpy as np
from mpi4py import MPI
import hpccoll
comm = MPI.COMM_WORLD
res = {}
cases = []
for coll in ("allreduce", "bcast", "reduce", "allgather"):
    for nbytes in (8, 4096):
        n = nbytes // 4
        if coll == "allreduce":
            x, y = np.ones(n, np.float32), np.empty(n, np.float32)
            mpi = lambda x=x, y=y: comm.Allreduce(x, y)
            req = hpccoll.allreduce_init(comm, x, y, algorithm="native")
        elif coll == "reduce":
            x, y = np.ones(n, np.float32), np.empty(n, np.float32)
            mpi = lambda x=x, y=y: comm.Reduce(x, y, root=0)
            req = hpccoll.reduce_init(comm, x, y, algorithm="native")
        elif coll == "bcast":
            x = np.ones(n, np.float32)
            mpi = lambda x=x: comm.Bcast(x, root=0)
            req = hpccoll.bcast_init(comm, x, algorithm="native")
        else:
            x, y = np.ones(n, np.float32), np.empty(n * comm.size, np.float32)
            mpi = lambda x=x, y=y: comm.Allgather(x, y)
            req = hpccoll.allgather_init(comm, x, y, algorithm="native")
        cases.append((coll, nbytes, mpi, lambda req=req: (req.start(), req.wait()), req))
def loop(f, calls):
    comm.Barrier(); t = time.perf_counter()
    for _ in range(calls): f()
    return comm.allreduce((time.perf_counter() - t) / calls, op=MPI.MAX)
for coll, nbytes, mpi, ours, req in cases:
    calls = max(20, int(0.1 / max(loop(mpi, 200), 1e-7)))
    a, b = [], []
    for _ in range(7):
        a.append(loop(mpi, calls)); b.append(loop(ours, calls))
    if comm.rank == 0:
        print(f"{coll:10s} {nbytes:5d} mpi4py {np.median(a)*1e6:7.2f} us  hpccoll native persistent {np.median(b)*1e6:7.2f} us  ratio {np.median(a)/np.median(b):.2f}x", flush=True)
    req.free()
