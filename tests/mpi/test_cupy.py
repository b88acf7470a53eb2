"""CuPy buffers: the same results as NumPy, through a CUDA-aware MPI or staged through host
memory.  Skipped where CuPy or a GPU is absent."""

from __future__ import annotations

import numpy as np
import pytest

from mpi_cases import data


cupy = pytest.importorskip("cupy")


def _gpus() -> int:
    try:
        return cupy.cuda.runtime.getDeviceCount()
    except cupy.cuda.runtime.CUDARuntimeError:
        return 0


pytestmark = pytest.mark.skipif(_gpus() < 1, reason="no GPU")


@pytest.mark.mpi(ranks=[1, 2], timeout=300)
def test_cupy_buffers_match_numpy(mpi_ranks, comm):
    import hpccoll
    from mpi4py import MPI
    p, r = comm.size, comm.rank
    for name in ["ring", "direct", "native"]:
        for dtype in ["float32", "float64", "int32", "float16"]:
            host = data(r, 1000, dtype)
            want = np.zeros(1000, dtype)
            comm.Allreduce(host, want)
            got = cupy.zeros(1000, dtype)
            hpccoll.allreduce(comm, cupy.asarray(host), got, algorithm=name)
            assert np.array_equal(cupy.asnumpy(got), want), (name, dtype)
            inplace = cupy.asarray(host)
            hpccoll.allreduce(comm, MPI.IN_PLACE, inplace, algorithm=name)
            assert np.array_equal(cupy.asnumpy(inplace), want), (name, dtype, "in place")
            gathered = np.zeros(1000 * p, dtype)
            comm.Allgather(host, gathered)
            got = cupy.zeros(1000 * p, dtype)
            hpccoll.allgather(comm, cupy.asarray(host), got, algorithm=name)
            assert np.array_equal(cupy.asnumpy(got), gathered), (name, dtype)
    for name in ["bruck", "pairwise", "native"]:
        host = data(r, 7 * p, "float32")
        want = np.zeros_like(host)
        comm.Alltoall(host, want)
        got = cupy.zeros(7 * p, "float32")
        hpccoll.alltoall(comm, cupy.asarray(host), got, algorithm=name)
        assert np.array_equal(cupy.asnumpy(got), want), name


@pytest.mark.mpi(ranks=[1], timeout=60)
def test_mixed_numpy_and_cupy_is_refused(mpi_ranks, comm):
    import hpccoll
    with pytest.raises(TypeError, match="both NumPy or both CuPy"):
        hpccoll.allreduce(comm, np.zeros(4), cupy.zeros(4))
