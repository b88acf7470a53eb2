"""The device-path cases that run on any device memory: Numba's CUDA simulator
(tests/mpi/test_device.py) and a real GPU's CuPy, Numba and PyTorch arrays
(tests/mpi/test_gpu.py, perf/gpu_check.sh).  Importing this module switches nothing on."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from mpi_cases import data


@dataclass(frozen=True)
class Memory:
    """A kind of device array: ``to_gpu(host)`` a new one, ``to_host(array)`` its values,
    ``fill(array, host)`` overwrites it."""

    name: str
    to_gpu: Callable[[np.ndarray], Any]
    to_host: Callable[[Any], np.ndarray]
    fill: Callable[[Any, np.ndarray], None]


def numba_memory() -> Memory:
    from numba import cuda
    return Memory("numba", cuda.to_device, lambda a: a.copy_to_host(),
                  lambda a, values: a.copy_to_device(values))


def each_path(comm):
    """(path name, communicator) for staging and for GPU-aware MPI: each path on its own
    duplicate, because a planned call keeps the decision it was planned with."""
    for aware in ("0", "1"):
        os.environ["HPCCOLL_GPU_AWARE"] = aware
        yield ("staged" if aware == "0" else "gpu-aware"), comm.Dup()
    del os.environ["HPCCOLL_GPU_AWARE"]


def algorithms_for(collective, p, rank):
    from hpccoll import registry
    from hpccoll.collectives import uniform_call
    call = uniform_call(collective, p, rank, 1)
    return [a.name for a in registry.algorithms(collective) if a.violated(call) is None] + \
        ["native"]


def run_every_collective(comm, path, p, r, memory):
    """Every algorithm of every collective on device arrays of ``memory`` against the native
    collective on NumPy arrays (small blocks: the simulator runs every kernel thread in
    Python)."""
    dev, host = memory.to_gpu, memory.to_host
    import hpccoll
    from mpi4py import MPI
    n = 3
    for dtype in ("float32", "int32"):
        for name in algorithms_for("allgather", p, r):
            send = data(r, n, dtype)
            want = np.zeros(n * p, dtype)
            comm.Allgather(send, want)
            got = dev(np.zeros(n * p, dtype))
            hpccoll.allgather(comm, dev(send), got, algorithm=name)
            assert np.array_equal(host(got), want), (path, "allgather", name, dtype)
            inplace = want.copy()
            inplace[:r * n] = 0
            inplace = dev(inplace)
            hpccoll.allgather(comm, MPI.IN_PLACE, inplace, algorithm=name)
            assert np.array_equal(host(inplace), want), (path, "allgather in place", name)
            counts = [(2 * i + 1) % 4 for i in range(p)]
            send = data(r, counts[r], dtype)
            want = np.zeros(sum(counts), dtype)
            comm.Allgatherv(send, [want, counts])
            got = dev(np.zeros(sum(counts), dtype))
            hpccoll.allgather(comm, dev(send), got, recvcounts=counts, algorithm=name)
            assert np.array_equal(host(got), want), (path, "allgatherv", name, counts)
        for name in algorithms_for("alltoall", p, r):
            send = data(r, n * p, dtype)
            want = np.zeros_like(send)
            comm.Alltoall(send, want)
            got = dev(np.zeros_like(send))
            hpccoll.alltoall(comm, dev(send), got, algorithm=name)
            assert np.array_equal(host(got), want), (path, "alltoall", name, dtype)
        sendcounts = [(r + j) % 3 + 1 for j in range(p)]
        recvcounts = [(j + r) % 3 + 1 for j in range(p)]
        send = data(r, sum(sendcounts), dtype)
        want = np.zeros(sum(recvcounts), dtype)
        comm.Alltoallv([send, sendcounts], [want, recvcounts])
        for name in algorithms_for("alltoallv", p, r):
            got = dev(np.zeros_like(want))
            hpccoll.alltoallv(comm, [dev(send), sendcounts], [got, recvcounts], algorithm=name)
            assert np.array_equal(host(got), want), (path, "alltoallv", name, dtype)
        for op in ("sum", "max"):
            mpi_op = {"sum": MPI.SUM, "max": MPI.MAX}[op]
            for name in algorithms_for("allreduce", p, r):
                send = data(r, 5, dtype)
                got, want = against_mpi(comm, "allreduce", send, memory, name, op=mpi_op)
                assert np.array_equal(got, want), (path, "allreduce", name, dtype, op)
                inplace = dev(send)
                hpccoll.allreduce(comm, MPI.IN_PLACE, inplace, op=mpi_op, algorithm=name)
                assert np.array_equal(host(inplace), want), (path, "allreduce in place", name)
            for name in algorithms_for("reduce_scatter", p, r):
                send = data(r, n * p, dtype)
                want = np.zeros(n, dtype)
                comm.Reduce_scatter_block(send, want, op=mpi_op)
                got = dev(np.zeros(n, dtype))
                hpccoll.reduce_scatter(comm, dev(send), got, op=mpi_op, algorithm=name)
                assert np.array_equal(host(got), want), (path, "reduce_scatter", name, op)
        root = p - 1
        for name in algorithms_for("bcast", p, r):
            want = data(root, 7, dtype)
            buf = dev(want if r == root else np.zeros_like(want))
            hpccoll.bcast(comm, buf, root=root, algorithm=name)
            assert np.array_equal(host(buf), want), (path, "bcast", name, dtype)
        for name in algorithms_for("reduce", p, r):
            got, want = against_mpi(comm, "reduce", data(r, 7, dtype), memory, name,
                                    root=root)
            if r == root:
                assert np.array_equal(got, want), (path, "reduce", name, dtype)


def against_mpi(comm, collective, send, memory, algorithm, **keywords):
    """hpccoll's ``collective`` (allreduce, reduce: a result the size of the input) with
    ``algorithm`` on ``memory``'s copies of ``send`` into a zeroed receive buffer, and MPI's
    own on NumPy arrays, with the same ``keywords`` (op, root): (hpccoll's result copied
    to the host, MPI's)."""
    import hpccoll
    want = np.zeros_like(send)
    getattr(comm, collective.capitalize())(send, want, **keywords)
    got = memory.to_gpu(np.zeros_like(send))
    getattr(hpccoll, collective)(comm, memory.to_gpu(send), got, algorithm=algorithm,
                                 **keywords)
    return memory.to_host(got), want


def run_nonblocking_and_persistent(comm, duplicate, path, r, memory):
    """iallreduce and allreduce_init (three starts on new values) on ``memory``'s arrays."""
    import hpccoll
    dev, host = memory.to_gpu, memory.to_host
    for name in ("ring", "recursive_doubling", "native"):
        send = data(r, 9, "float64")
        want = np.zeros_like(send)
        comm.Allreduce(send, want)
        got = dev(np.zeros_like(send))
        request = hpccoll.iallreduce(duplicate, dev(send), got, algorithm=name)
        request.wait()
        assert np.array_equal(host(got), want), (path, name, "non-blocking")
        source, result = dev(send), dev(np.zeros_like(send))
        persistent = hpccoll.allreduce_init(duplicate, source, result, algorithm=name)
        for salt in range(3):
            values = data(r, 9, "float64", salt=salt)
            expected = np.zeros_like(values)
            comm.Allreduce(values, expected)
            memory.fill(source, values)
            persistent.start()
            persistent.wait()
            assert np.array_equal(host(result), expected), (path, name, "persistent", salt)
        persistent.free()
