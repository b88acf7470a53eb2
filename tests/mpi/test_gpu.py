"""Device buffers on a real GPU: CuPy arrays, Numba device arrays and PyTorch CUDA tensors
give the bytes NumPy buffers give, staged through the host and (where the MPI library is
GPU-aware) directly; the device kernels against the host kernels on GPU memory.

Marked ``gpu``; they skip, saying why, without a CUDA GPU or under Numba's CUDA simulator
(which tests/mpi/test_device.py switches on for the whole pytest process: run this file on its
own, as perf/gpu_check.sh does).
"""

from __future__ import annotations

import os

import numpy as np
import pytest

from mpi_cases import data


def _why_not() -> str | None:
    if os.environ.get("NUMBA_ENABLE_CUDASIM") == "1":
        return "Numba's CUDA simulator is on (NUMBA_ENABLE_CUDASIM=1): run this file alone"
    try:
        from numba import cuda
        if not cuda.is_available():
            return "no CUDA GPU (numba.cuda.is_available() is False)"
    except Exception as error:                # no driver, no toolkit
        return f"numba.cuda cannot start: {error}"
    return None


pytestmark = [pytest.mark.gpu, pytest.mark.skipif(_why_not() is not None,
                                                  reason=_why_not() or "")]


def _libraries():
    """(name, from_numpy, to_numpy) of every GPU array library installed."""
    from numba import cuda
    found = [("numba", cuda.to_device, lambda a: a.copy_to_host())]
    try:
        import cupy
        found.append(("cupy", cupy.asarray, cupy.asnumpy))
    except ImportError:
        pass
    try:
        import torch
        if torch.cuda.is_available():
            found.append(("torch", lambda a: torch.from_numpy(a).cuda(),
                          lambda t: t.cpu().numpy()))
    except ImportError:
        pass
    return found


def _paths():
    from hpccoll.runtime import buffers
    return ["0", "1"] if buffers.library_gpu_aware() else ["0"]


@pytest.mark.mpi(ranks=[1, 2], timeout=600)
def test_gpu_buffers_match_numpy(mpi_ranks, comm):
    import hpccoll
    from mpi4py import MPI
    p, r = comm.size, comm.rank
    for aware in _paths():
        os.environ["HPCCOLL_GPU_AWARE"] = aware
        duplicate = comm.Dup()
        for library, to_gpu, to_host in _libraries():
            what = (library, "gpu-aware" if aware == "1" else "staged")
            for name in ["ring", "recursive_doubling", "direct", "native"]:
                for dtype in ["float32", "float64", "int32"]:
                    values = data(r, 100000, dtype)
                    want = np.zeros_like(values)
                    comm.Allreduce(values, want)
                    got = to_gpu(np.zeros_like(values))
                    hpccoll.allreduce(duplicate, to_gpu(values), got, algorithm=name)
                    assert np.array_equal(to_host(got), want), (*what, name, dtype)
                    inplace = to_gpu(values)
                    hpccoll.allreduce(duplicate, MPI.IN_PLACE, inplace, algorithm=name)
                    assert np.array_equal(to_host(inplace), want), (*what, name, "in place")
            for name in ["ring", "bruck", "pairwise", "native"]:
                values = data(r, 7 * p, "float32")
                want = np.zeros_like(values)
                comm.Alltoall(values, want)
                got = to_gpu(np.zeros_like(values))
                hpccoll.alltoall(duplicate, to_gpu(values), got, algorithm=name)
                assert np.array_equal(to_host(got), want), (*what, name)
            for name in ["ring", "multiring", "native"]:
                values = data(r, 1000, "float64")
                want = np.zeros(1000 * p)
                comm.Allgather(values, want)
                got = to_gpu(np.zeros(1000 * p))
                hpccoll.allgather(duplicate, to_gpu(values), got, algorithm=name)
                assert np.array_equal(to_host(got), want), (*what, name)
    del os.environ["HPCCOLL_GPU_AWARE"]


def test_device_kernels_on_gpu_memory_match_the_host_kernels():
    from numba import cuda
    from hpccoll.runtime import device, kernels
    rng = np.random.default_rng(5)
    for dtype in ["float32", "float64", "int32", "uint64", "complex128"]:
        a = rng.integers(0, 4, 100003).astype(dtype)
        b = rng.integers(0, 4, 100003).astype(dtype)
        for op in kernels.OPS:
            if kernels.applies(op, dtype):
                want = np.empty_like(a)
                kernels.reducer(op, dtype)(want, a, b)
                got = cuda.to_device(np.zeros_like(a))
                device.reduction(op).pair(got, cuda.to_device(a), cuda.to_device(b))
                assert np.array_equal(got.copy_to_host(), want), (op, dtype)
