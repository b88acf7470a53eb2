"""Device buffers without a GPU: Numba's CUDA simulator stands in for one.

Under ``NUMBA_ENABLE_CUDASIM=1`` Numba device arrays (``numba.cuda.to_device``,
``device_array``) are host memory behind Numba's device-array type, and Numba CUDA kernels run
in Python, so hpccoll's device path runs for real: the arrays are recognised as GPU memory,
and either staged through pinned host buffers (``HPCCOLL_GPU_AWARE=0``, as with an MPI that
cannot read GPU memory) or given to MPI directly with the packing and reductions done by the
device kernels (``HPCCOLL_GPU_AWARE=1``: the simulator's memory is host memory, which this MPI
reads).  Every algorithm of every collective must give the bytes NumPy buffers give.

This module switches the simulator on for the whole pytest process (and the MPI jobs it
launches); the tests that need a real GPU (tests/mpi/test_gpu.py) skip under it: run them on
their own (perf/gpu_check.sh).
"""

from __future__ import annotations

import os

os.environ.setdefault("NUMBA_ENABLE_CUDASIM", "1")

import ctypes  # noqa: E402

import numpy as np  # noqa: E402
import pytest  # noqa: E402

from mpi_cases import data  # noqa: E402

RANKS = [1, 2, 3, 4]
SIMULATED = os.environ["NUMBA_ENABLE_CUDASIM"] == "1"
pytestmark = pytest.mark.skipif(not SIMULATED, reason="NUMBA_ENABLE_CUDASIM is not 1: these "
                                                      "tests run on the CUDA simulator")


def algorithms_for(collective, p, rank):
    from hpccoll import registry
    from hpccoll.collectives import uniform_call
    call = uniform_call(collective, p, rank, 1)
    return [a.name for a in registry.algorithms(collective) if a.violated(call) is None] + \
        ["native"]


def dev(array):
    from numba import cuda
    return cuda.to_device(array)


def host(array):
    return array.copy_to_host()


def each_path(comm):
    """(path name, communicator) for staging and for GPU-aware MPI: each path on its own
    duplicate, because a planned call keeps the decision it was planned with."""
    for aware in ("0", "1"):
        os.environ["HPCCOLL_GPU_AWARE"] = aware
        yield ("staged" if aware == "0" else "gpu-aware"), comm.Dup()
    del os.environ["HPCCOLL_GPU_AWARE"]


def run_every_collective(comm, path, p, r):
    """Every algorithm of every collective on device arrays against the native collective on
    NumPy arrays (small blocks: the simulator runs every kernel thread in Python)."""
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
                want = np.zeros_like(send)
                comm.Allreduce(send, want, op=mpi_op)
                got = dev(np.zeros_like(send))
                hpccoll.allreduce(comm, dev(send), got, op=mpi_op, algorithm=name)
                assert np.array_equal(host(got), want), (path, "allreduce", name, dtype, op)
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
            send = data(r, 7, dtype)
            want = np.zeros_like(send)
            comm.Reduce(send, want, root=root)
            got = dev(np.zeros_like(send))
            hpccoll.reduce(comm, dev(send), got, root=root, algorithm=name)
            if r == root:
                assert np.array_equal(host(got), want), (path, "reduce", name, dtype)


@pytest.mark.mpi(ranks=RANKS, timeout=600)
def test_every_algorithm_on_device_arrays_matches_numpy(mpi_ranks, comm):
    p, r = comm.size, comm.rank
    for path, duplicate in list(each_path(comm)):
        run_every_collective(duplicate, path, p, r)


@pytest.mark.mpi(ranks=[2, 3], timeout=300)
def test_nonblocking_and_persistent_on_device(mpi_ranks, comm):
    import hpccoll
    r = comm.rank
    for path, duplicate in list(each_path(comm)):
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
                source.copy_to_device(values)
                persistent.start()
                persistent.wait()
                assert np.array_equal(host(result), expected), (path, name, "persistent", salt)
            persistent.free()


@pytest.mark.mpi(ranks=[2], timeout=300)
def test_staging_buffers_are_allocated_once_per_planned_call(mpi_ranks, comm):
    import hpccoll
    from hpccoll.runtime import device
    os.environ["HPCCOLL_GPU_AWARE"] = "0"
    made = []
    pinned = device.pinned

    def counting(count, dtype):
        made.append(count)
        return pinned(count, dtype)
    device.pinned = counting
    try:
        r = comm.rank
        duplicate = comm.Dup()
        source, result = dev(np.zeros(6000, np.float32)), dev(np.zeros(6000, np.float32))
        for call in range(100):
            values = data(r, 6000, "float32", salt=call)
            want = np.zeros_like(values)
            comm.Allreduce(values, want)
            source.copy_to_device(values)
            hpccoll.allreduce(duplicate, source, result, algorithm="ring")
            assert np.array_equal(host(result), want), call
        assert made == [6000, 6000], made          # one send and one receive buffer
        for call in range(100):                    # native: the same
            hpccoll.allreduce(duplicate, source, result, algorithm="native")
        assert made == [6000, 6000] * 2, made
    finally:
        device.pinned = pinned
        del os.environ["HPCCOLL_GPU_AWARE"]


class Interface:
    """An object exposing only ``__cuda_array_interface__`` (and optionally DLPack's device),
    over host memory: what CuPy arrays and PyTorch CUDA tensors look like to hpccoll."""

    def __init__(self, array, device_id=None, strides=None):
        self.array = array
        self.device_id = device_id
        self.__cuda_array_interface__ = {
            "shape": array.shape if strides is None else (array.size // 2,),
            "typestr": array.dtype.str, "strides": strides, "version": 3,
            "data": (array.ctypes.data, False)}
        if device_id is not None:
            self.__dlpack_device__ = lambda: (2, device_id)


@pytest.mark.mpi(ranks=[1, 2], timeout=300)
def test_any_cuda_array_interface_and_host_buffers(mpi_ranks, comm):
    import array
    import hpccoll
    r = comm.rank
    send = data(r, 1000, "float64")
    want = np.zeros_like(send)
    comm.Allreduce(send, want)
    for name in ("ring", "native"):
        got = np.zeros_like(send)
        hpccoll.allreduce(comm, Interface(send.copy()), Interface(got), algorithm=name)
        assert np.array_equal(got, want), name
        got = np.zeros_like(send)
        hpccoll.allreduce(comm, Interface(send.copy(), 0), Interface(got, 0), algorithm=name)
        assert np.array_equal(got, want), (name, "DLPack device 0")
    # host memory beyond NumPy: array.array, bytearray, memoryview
    got = array.array("d", bytes(8000))
    hpccoll.allreduce(comm, array.array("d", send.tobytes()), got, algorithm="ring")
    assert np.array_equal(np.frombuffer(got), want)
    gathered = bytearray(3 * comm.size)
    hpccoll.allgather(comm, memoryview(bytes([r + 1] * 3)), gathered, algorithm="ring")
    assert list(gathered) == [q + 1 for q in range(comm.size) for _ in range(3)]


@pytest.mark.mpi(ranks=[1, 2, 3], timeout=300)
def test_device_misuse_raises_on_every_rank_before_any_message(mpi_ranks, comm):
    import hpccoll
    from mpi4py import MPI
    from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray
    p, r = comm.size, comm.rank
    n = 1 << 16
    values = data(r, n, "float32")
    result = dev(np.full(n, 7, np.float32))
    with pytest.raises(TypeError, match="host memory and recvbuf device memory"):
        hpccoll.allreduce(comm, values, result, algorithm="ring")
    with pytest.raises(ValueError, match="non-contiguous device array"):
        hpccoll.allreduce(comm, FakeCUDAArray(np.zeros(2 * n, np.float32)[::2]), result)
    strided = Interface(np.zeros(2 * n, np.float32), strides=(8,))
    with pytest.raises(ValueError, match="non-contiguous device array"):
        hpccoll.allreduce(comm, strided, result, algorithm="ring")
    elsewhere = Interface(np.zeros(n, np.float32), device_id=1)
    with pytest.raises(ValueError, match="on GPU 1 but the current device is GPU 0"):
        hpccoll.allreduce(comm, elsewhere, result, algorithm="ring")
    with pytest.raises(TypeError, match="must be an array"):
        hpccoll.allreduce(comm, object(), result)
    os.environ["HPCCOLL_GPU_AWARE"] = "1"
    try:
        half = dev(np.ones(n, np.float16))
        with pytest.raises(TypeError, match="device kernels do not reduce float16"):
            hpccoll.allreduce(comm.Dup(), half, dev(np.zeros(n, np.float16)), algorithm="ring")
    finally:
        del os.environ["HPCCOLL_GPU_AWARE"]
    assert np.all(host(result) == 7)                   # untouched
    # the communicator is usable afterwards, and float16 sums stage through the host
    half = dev(np.ones(n, np.float16))
    total = dev(np.zeros(n, np.float16))
    hpccoll.allreduce(comm, half, total, algorithm="ring")
    assert np.all(host(total) == p)
    hpccoll.allreduce(comm, MPI.IN_PLACE, result, algorithm="ring")
    assert np.all(host(result) == 7 * p)


@pytest.mark.mpi(ranks=[1, 2], timeout=300)
def test_comm_gives_mpi_device_memory_only_where_it_is_gpu_aware(mpi_ranks, comm):
    """hpccoll.Comm's hand-over to MPI's own collective (a user-defined op, IN_PLACE
    alltoall): device buffers with an MPI that is not GPU-aware raise TypeError on every
    rank before any message (MPI would read the device pointer as host memory), the
    receive buffer untouched; where MPI is GPU-aware (here: the simulator's memory is host
    memory) they go to it and give MPI's result."""
    import hpccoll
    from mpi4py import MPI
    p, r = comm.size, comm.rank
    n = 4096
    values = data(r, n, "float64")
    biggest = MPI.Op.Create(lambda a, b, datatype: np.maximum(
        np.frombuffer(a, np.float64), np.frombuffer(b, np.float64),
        out=np.frombuffer(b, np.float64)), commute=True)
    try:
        for aware in ("0", "1"):
            os.environ["HPCCOLL_GPU_AWARE"] = aware
            wrapped = hpccoll.Comm(comm)
            result = dev(np.full(n, 7.0))
            to_all = dev(np.arange(2.0 * p) + 10 * r)
            if aware == "0":
                with pytest.raises(TypeError, match="not GPU-aware"):
                    wrapped.Allreduce(dev(values), result, op=biggest)
                with pytest.raises(TypeError, match="not GPU-aware"):
                    wrapped.Alltoall(MPI.IN_PLACE, to_all)
                assert np.all(host(result) == 7)
                continue
            wrapped.Allreduce(dev(values), result, op=biggest)
            want = np.empty(n)
            comm.Allreduce(values, want, op=MPI.MAX)
            assert np.array_equal(host(result), want)
            wrapped.Alltoall(MPI.IN_PLACE, to_all)
            mine = np.arange(2.0 * p) + 10 * r
            comm.Alltoall(MPI.IN_PLACE, mine)
            assert np.array_equal(host(to_all), mine)
    finally:
        del os.environ["HPCCOLL_GPU_AWARE"]
        biggest.Free()


@pytest.mark.mpi(ranks=[1], timeout=120)
def test_gpu_aware_detection_and_override(mpi_ranks, comm):
    from mpi4py import MPI
    from hpccoll.runtime import buffers
    try:
        query = ctypes.CDLL(MPI.__file__).MPIX_Query_cuda_support
        query.restype = ctypes.c_int
        library = bool(query())
    except AttributeError:
        library = False
    assert "HPCCOLL_GPU_AWARE" not in os.environ
    assert buffers.gpu_aware() is library
    for text, expected in (("1", True), ("yes", True), ("0", False), ("off", False)):
        os.environ["HPCCOLL_GPU_AWARE"] = text
        assert buffers.gpu_aware() is expected, text
    os.environ["HPCCOLL_GPU_AWARE"] = "maybe"
    with pytest.raises(ValueError, match="HPCCOLL_GPU_AWARE='maybe'"):
        buffers.gpu_aware()
    del os.environ["HPCCOLL_GPU_AWARE"]


DEVICE_DTYPES = ["float32", "float64", "int8", "int32", "int64", "uint16", "uint64",
                 "complex64", "complex128", "bool"]


@pytest.mark.parametrize("dtype", DEVICE_DTYPES)
def test_device_kernels_match_the_host_kernels(dtype):
    """The device reduction of every op defined on ``dtype`` and the device block mover
    give what the host kernels give (no MPI: the simulator runs the CUDA kernels)."""
    from hpccoll.runtime import device, kernels
    rng = np.random.default_rng(3)
    a = rng.integers(0, 4, 37).astype(dtype)
    b = rng.integers(0, 4, 37).astype(dtype)
    for op in kernels.OPS:
        if not kernels.applies(op, dtype):
            continue
        assert device.reduces(op, dtype)
        want = np.empty_like(a)
        kernels.reducer(op, dtype)(want, a, b)
        got = dev(np.zeros_like(a))
        device.reduction(op).pair(got, dev(a), dev(b))
        assert np.array_equal(host(got), want), op
    source = rng.integers(1, 100, 60).astype(dtype)
    for starts, counts in (([40, 3, 17, 0, 49], [5, 2, 0, 3, 1]), ([2, 30], [2, 2]),
                           ([7], [0])):
        packed = np.zeros(sum(counts), dtype)
        move, arguments = kernels.block_mover(packed, source, np.array(starts),
                                              np.array(counts), gather=True)
        move(*arguments)
        device_packed = dev(np.zeros_like(packed))
        move, arguments = device.block_mover(device_packed, dev(source), np.array(starts),
                                             np.array(counts), gather=True)
        move(*arguments)
        assert np.array_equal(host(device_packed), packed), (starts, counts)
        spread = dev(np.zeros_like(source))
        move, arguments = device.block_mover(device_packed, spread, np.array(starts),
                                             np.array(counts), gather=False)
        move(*arguments)
        want = np.zeros_like(source)
        for s, c in zip(starts, counts):
            want[s:s + c] = source[s:s + c]
        assert np.array_equal(host(spread), want), (starts, counts)
    assert not device.reduces("sum", "float16")


@pytest.mark.mpi(ranks=[2], timeout=300)
def test_bench_device_cuda(mpi_ranks, comm):
    """``hpccoll bench --device cuda`` checks every algorithm's data on device buffers."""
    from hpccoll.tools import bench
    results = bench.run(comm, "allreduce", ["native", "ring", "recursive_doubling"], [64, 256],
                        iterations=2, warmup=1, memory="cuda")
    assert [r.algorithm for r in results] == ["native", "ring", "recursive_doubling"] * 2
    assert all(r.wrong == 0 and r.time_us > 0 for r in results)


def test_bench_device_cuda_without_a_gpu_says_so_in_one_line():
    import subprocess
    import sys
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    done = subprocess.run([sys.executable, "-m", "hpccoll", "bench", "allreduce", "-d", "cuda",
                           "-m", "8:8"], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done
    assert done.stderr.strip().splitlines() == [
        "hpccoll bench: error: --device cuda: no CUDA GPU here (numba.cuda finds none; "
        "NUMBA_ENABLE_CUDASIM=1 simulates one)"], done.stderr
