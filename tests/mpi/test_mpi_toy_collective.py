"""The toy collective (tests/toy_collective.py: an inclusive scan, one spec and one planner
added from outside the package) under real MPI: callable in its three forms against the MPI
library's own ``Scan``, repeats included, and benchmarkable by ``hpccoll bench``'s runner with
its data check."""

from __future__ import annotations

import io

import numpy as np
import pytest


@pytest.mark.mpi(ranks=[2, 3], timeout=300)
def test_toy_collective_is_callable_and_benchmarkable(mpi_ranks, comm):
    from mpi4py import MPI

    import hpccoll
    import toy_collective
    from hpccoll.tools import bench

    toy_collective.install()
    r = comm.rank
    for algorithm in ("linear", "native", "auto"):
        for n, dtype, op in ((5, "int64", MPI.SUM), (1000, "float64", MPI.MAX),
                             (0, "int32", MPI.SUM)):
            send = (np.arange(n) * (r + 1) % 7).astype(dtype)
            want = np.zeros(n, dtype)
            comm.Scan(send, want, op=op)
            for repeat in range(3):             # the first call, then its repeats
                got = np.full(n, -1, dtype)
                hpccoll.scan(comm, send, got, op=op, algorithm=algorithm)
                assert np.array_equal(got, want), (algorithm, n, repeat)
            got = np.full(n, -1, dtype)
            hpccoll.iscan(comm, send, got, op=op, algorithm=algorithm).wait()
            assert np.array_equal(got, want), (algorithm, n, "non-blocking")
            got = np.full(n, -1, dtype)
            persistent = hpccoll.scan_init(comm, send, got, op=op, algorithm=algorithm)
            for start in range(2):
                got[...] = -1
                persistent.start()
                persistent.wait()
                assert np.array_equal(got, want), (algorithm, n, "persistent", start)
            persistent.free()
    if r == 1:
        assert hpccoll.scan.__doc__.startswith("Inclusive prefix reduction")

    out = io.StringIO()
    results = bench.run(comm, "scan", ["native", "linear", "auto"], [8, 4096], iterations=5,
                        warmup=1, out=out)
    assert [(x.algorithm, x.bytes, x.wrong) for x in results] == [
        (name, size, 0) for size in (8, 4096) for name in ("native", "linear", "auto")]
    assert {x.resolved for x in results if x.algorithm == "auto"} == {"linear"}
    assert all(x.time_us > 0 and x.vs_native for x in results)
    if r == 0:
        assert out.getvalue().startswith(f"# hpccoll bench scan: {comm.size} ranks, float32")
