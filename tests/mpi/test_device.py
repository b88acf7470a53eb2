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
import logging  # noqa: E402
from contextlib import contextmanager  # noqa: E402

import numpy as np  # noqa: E402
import pytest  # noqa: E402

from device_cases import (each_path, numba_memory, run_every_collective,  # noqa: E402
                          run_nonblocking_and_persistent)
from mpi_cases import data  # noqa: E402

RANKS = [1, 2, 3, 4]
SIMULATED = os.environ["NUMBA_ENABLE_CUDASIM"] == "1"
pytestmark = pytest.mark.skipif(not SIMULATED, reason="NUMBA_ENABLE_CUDASIM is not 1: these "
                                                      "tests run on the CUDA simulator")


def dev(array):
    from numba import cuda
    return cuda.to_device(array)


def host(array):
    return array.copy_to_host()


@pytest.mark.mpi(ranks=RANKS, timeout=600)
def test_every_algorithm_on_device_arrays_matches_numpy(mpi_ranks, comm):
    p, r = comm.size, comm.rank
    for path, duplicate in each_path(comm):
        run_every_collective(duplicate, path, p, r, numba_memory())


@pytest.mark.mpi(ranks=[2, 3], timeout=300)
def test_nonblocking_and_persistent_on_device(mpi_ranks, comm):
    for path, duplicate in each_path(comm):
        run_nonblocking_and_persistent(comm, duplicate, path, comm.rank, numba_memory())


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
        p = comm.size                              # a stream: each yielded slice is final
        block = dev(data(r, 3000, "float32"))
        gathered = dev(np.zeros(3000 * p, np.float32))
        want = np.zeros(3000 * p, np.float32)
        comm.Allgather(data(r, 3000, "float32"), want)
        for arrived in hpccoll.allgather_stream(duplicate, block, gathered, algorithm="ring"):
            for _, where in arrived:
                assert np.array_equal(host(gathered)[where], want[where]), where
    finally:
        device.pinned = pinned
        del os.environ["HPCCOLL_GPU_AWARE"]


@pytest.mark.mpi(ranks=[2], timeout=300)
def test_staging_and_scratch_memory_come_from_pools(mpi_ranks, comm):
    """Pinned and device memory are asked of the driver once per size in use, not per call:
    a second concurrent call of one signature (whose staging buffers are its own) reuses
    pooled ones; a reduce's other rank, which has no receive buffer, asks for no pinned
    memory of 0 bytes (cuMemHostAlloc(0) fails); GPU-aware non-blocking calls take their
    scratch and the block mover's tables from the device pool."""
    import hpccoll
    from hpccoll.runtime import device
    asked = {"pinned": [], "device": []}
    device._cuda()
    real = {"pinned": device.cuda.pinned_array, "device": device.cuda.device_array}

    def pinned_array(count, dtype):
        if count == 0:
            raise RuntimeError("cuMemHostAlloc(0): CUDA_ERROR_INVALID_VALUE")
        asked["pinned"].append(count)
        return real["pinned"](count, dtype)

    def device_array(count, dtype):
        if count:                              # (no elements: nothing asked of the driver)
            asked["device"].append(count)
        return real["device"](count, dtype)
    device.cuda.pinned_array, device.cuda.device_array = pinned_array, device_array
    r = comm.rank
    values = data(r, 3000, "float32")
    want = np.zeros_like(values)
    comm.Allreduce(values, want)
    try:
        for aware in ("0", "1"):
            os.environ["HPCCOLL_GPU_AWARE"] = aware
            duplicate = comm.Dup()
            source = dev(values)
            for call in range(4):          # (without pools: 16 pinned or 8 device asks)
                results = dev(np.zeros_like(values)), dev(np.zeros_like(values))
                first = hpccoll.iallreduce(duplicate, source, results[0], algorithm="ring")
                second = hpccoll.iallreduce(duplicate, source, results[1], algorithm="ring")
                first.wait()
                second.wait()
                assert all(np.array_equal(host(x), want) for x in results), (aware, call)
            got = dev(np.zeros_like(values))
            hpccoll.reduce(duplicate, source, got, root=0, algorithm="binomial")
            if r == 0:
                assert np.array_equal(host(got), want), aware
            if aware == "0":                   # the call's own pair, the second call's pairs
                assert len(asked["pinned"]) <= 6, asked["pinned"]
        assert len(asked["device"]) <= 6, asked["device"]       # (8 calls' scratch)
    finally:
        device.cuda.pinned_array, device.cuda.device_array = real["pinned"], real["device"]
        del os.environ["HPCCOLL_GPU_AWARE"]


class Watched:
    """numba.cuda (the simulator's) with its synchronisation recorded in ``calls``: whole-device
    synchronizes, and each event's records, stream waits and host waits (the module's
    functions replaced meanwhile: the simulator's kernels need the module itself)."""

    def __init__(self, module):
        self.module, self.calls = module, []
        self.real = module.synchronize, module.event

    def __enter__(self):
        from hpccoll.runtime import device
        device._event.cache_clear()             # (hpccoll keeps an event a thread)
        synchronize, event = self.real

        def recorded_synchronize():
            self.calls.append("device synchronize")
            synchronize()
        self.module.synchronize = recorded_synchronize
        self.module.event = lambda *a, **k: WatchedEvent(event(*a, **k), self.calls)
        return self

    def __exit__(self, *exception):
        from hpccoll.runtime import device
        self.module.synchronize, self.module.event = self.real
        device._event.cache_clear()


class WatchedEvent:
    def __init__(self, event, calls):
        self.event, self.calls = event, calls

    def record(self, stream=0):
        self.calls.append(("record", stream))
        self.event.record(stream)

    def wait(self, stream=0):
        self.calls.append(("wait", stream))
        self.event.wait(stream)

    def synchronize(self):
        self.calls.append("event synchronize")
        self.event.synchronize()


@pytest.mark.mpi(ranks=[2], timeout=300)
def test_a_call_waits_for_its_producers_streams_not_the_whole_device(mpi_ranks, comm):
    """Item 8 of issue 34: a call on device arrays bound to the streams that produced them
    records an event on each (once per stream) and has hpccoll's stream wait for it where
    staging copies them, the host where MPI reads them; it never synchronizes the whole
    device (the user's work on other streams goes on).  Blocking, non-blocking, persistent;
    scheduled and native."""
    import hpccoll
    from hpccoll.runtime import device
    from numba import cuda
    r = comm.rank
    values = data(r, 500, "float64")
    want = np.zeros_like(values)
    comm.Allreduce(values, want)
    with Watched(device._cuda()) as watched:
        own = device.stream()
        producer, other = cuda.stream(), cuda.stream()
        for path, duplicate in each_path(comm):
            def waits(*streams):
                after = ("wait", own) if path == "staged" else "event synchronize"
                return [step for on in streams for step in (("record", on), after)]
            source = dev(values).bind(producer)
            for name in ("ring", "native"):
                result = dev(np.zeros_like(values)).bind(producer)
                starts = (lambda: hpccoll.allreduce(duplicate, source, result, algorithm=name),
                          lambda: hpccoll.iallreduce(duplicate, source, result,
                                                     algorithm=name).wait())
                for start in starts:
                    watched.calls.clear()
                    start()
                    assert watched.calls == waits(producer), (path, name, watched.calls)
                    assert np.array_equal(host(result), want), (path, name)
                result = dev(np.zeros_like(values)).bind(other)     # two producers
                persistent = hpccoll.allreduce_init(duplicate, source, result, algorithm=name)
                watched.calls.clear()
                persistent.start()
                persistent.wait()
                assert watched.calls == waits(producer, other), (path, name, watched.calls)
                assert np.array_equal(host(result), want), (path, name, "persistent")
                persistent.free()


@contextmanager
def copies():
    """Bytes the simulator's device arrays copy to the host (``down``) and from it (``up``)
    meanwhile."""
    from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray
    moved = {"down": 0, "up": 0}
    to_host, to_device = FakeCUDAArray.copy_to_host, FakeCUDAArray.copy_to_device

    def down(self, ary=None, stream=0):
        moved["down"] += self._ary.nbytes
        return to_host(self, ary, stream)

    def up(self, ary, stream=0):
        if not isinstance(ary, FakeCUDAArray):
            moved["up"] += self._ary.nbytes
        return to_device(self, ary, stream)
    FakeCUDAArray.copy_to_host, FakeCUDAArray.copy_to_device = down, up
    try:
        yield moved
    finally:
        FakeCUDAArray.copy_to_host, FakeCUDAArray.copy_to_device = to_host, to_device


@pytest.mark.mpi(ranks=[2], timeout=300)
def test_staging_copies_only_what_the_call_reads_and_writes(mpi_ranks, comm):
    """Item 9 of issue 34: staging copies the send buffer and, of the receive buffer, only
    the input in place (allgather's own block, a broadcast's root buffer, a reduction's
    vector) to the host, and back only what the call writes (not the own block of an
    allgather in place, nothing at a broadcast's root or a reduce's other rank, alltoallv's
    blocks without the gaps between them, which keep their values)."""
    import hpccoll
    from mpi4py import MPI
    p, r = comm.size, comm.rank
    n, size = 1000, 4000                   # elements of a block, its bytes (float32)
    block = data(r, n, "float32")
    gathered = np.zeros(n * p, np.float32)
    comm.Allgather(block, gathered)
    total = np.zeros(n, np.float32)
    comm.Allreduce(block, total)
    sendcounts = [n // 2 + j + r for j in range(p)]
    recvcounts = [n // 2 + r + j for j in range(p)]
    rdispls = [sum(recvcounts[:j]) + 3 * (j + 1) for j in range(p)]     # gaps of 3
    spread = data(r, sum(sendcounts), "float32")
    landed = np.full(rdispls[-1] + recvcounts[-1] + 3, -1, np.float32)
    comm.Alltoallv([spread, sendcounts], [landed, (recvcounts, rdispls)])
    os.environ["HPCCOLL_GPU_AWARE"] = "0"
    try:
        duplicate = comm.Dup()
        for scheduled in (("ring", "ring", "binomial", "binomial", "pairwise"), ("native",) * 5):
            gather, allreduce, bcast, reduce, alltoallv = scheduled
            cases = []
            recv = dev(np.zeros(n * p, np.float32))
            cases.append(("allgather", lambda: hpccoll.allgather(
                duplicate, dev(block), recv, algorithm=gather), recv, gathered, size, size * p))
            mine = np.zeros(n * p, np.float32)
            mine[r * n:(r + 1) * n] = block
            inplace = dev(mine)
            cases.append(("allgather in place", lambda: hpccoll.allgather(
                duplicate, MPI.IN_PLACE, inplace, algorithm=gather), inplace, gathered, size,
                size * (p - 1)))
            result = dev(np.zeros(n, np.float32))
            cases.append(("allreduce", lambda: hpccoll.allreduce(
                duplicate, dev(block), result, algorithm=allreduce), result, total, size, size))
            vector = dev(block)
            cases.append(("allreduce in place", lambda: hpccoll.allreduce(
                duplicate, MPI.IN_PLACE, vector, algorithm=allreduce), vector, total, size,
                size))
            broadcast = dev(block)
            cases.append(("bcast", lambda: hpccoll.bcast(
                duplicate, broadcast, root=1, algorithm=bcast), broadcast, data(1, n, "float32"),
                size if r == 1 else 0, 0 if r == 1 else size))
            reduced = dev(np.zeros(n, np.float32))
            cases.append(("reduce", lambda: hpccoll.reduce(
                duplicate, dev(block), reduced, root=0, algorithm=reduce), reduced,
                total if r == 0 else np.zeros(n, np.float32), size, size if r == 0 else 0))
            exchanged = dev(np.full_like(landed, -1))
            cases.append(("alltoallv", lambda: hpccoll.alltoallv(
                duplicate, [dev(spread), sendcounts], [exchanged, recvcounts, rdispls],
                algorithm=alltoallv), exchanged, landed, spread.nbytes, 4 * sum(recvcounts)))
            for name, run, got, want, down, up in cases:
                with copies() as moved:
                    run()
                assert np.array_equal(host(got), want), (name, scheduled[0])
                assert moved == {"down": down, "up": up}, (name, scheduled[0], moved)
    finally:
        del os.environ["HPCCOLL_GPU_AWARE"]


@pytest.mark.mpi(ranks=[2, 3], timeout=300)
def test_allgather_stream_on_staged_arrays_copies_each_byte_down_once(mpi_ranks, comm):
    """allgather_stream on staged device arrays hands each delivered region to the device
    before yielding it, and the copy-back at the end copies only what has not gone down yet:
    the bytes copied to the device are the call's result, once (out of place: every block;
    in place: all but the own block, which is not yielded either), each yielded slice final
    when it is yielded."""
    import hpccoll
    from mpi4py import MPI
    p, r = comm.size, comm.rank
    counts = [300 + 7 * q for q in range(p)]
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    block = data(r, counts[r], "float64")
    want = np.zeros(sum(counts))
    comm.Allgatherv(block, [want, counts])
    os.environ["HPCCOLL_GPU_AWARE"] = "0"
    try:
        duplicate = comm.Dup()
        for name in ("ring", "multiring"):
            for in_place in (False, True):
                start = np.zeros(sum(counts))
                if in_place:
                    start[starts[r]:starts[r] + counts[r]] = block
                gathered = dev(start)
                send = MPI.IN_PLACE if in_place else dev(block)
                seen = np.zeros(sum(counts), int)
                with copies() as moved:
                    for arrived in hpccoll.allgather_stream(duplicate, send, gathered,
                                                            recvcounts=counts,
                                                            algorithm=name):
                        now = gathered._ary.copy()          # (not a copy the test counts)
                        for _, where in arrived:
                            assert np.array_equal(now[where], want[where]), (name, where)
                            seen[where] += 1
                expected = np.ones_like(seen)       # (in place, the own block is there)
                expected[starts[r]:starts[r] + counts[r]] = 0 if in_place else 1
                assert np.array_equal(seen, expected), (name, in_place)
                assert np.array_equal(host(gathered), want), (name, in_place)
                result = want.nbytes - (block.nbytes if in_place else 0)
                assert moved == {"down": block.nbytes, "up": result}, (name, in_place, moved)
        nothing = hpccoll.allgather_stream(duplicate, dev(np.zeros(0)), dev(np.zeros(0)))
        assert list(nothing) == []                  # (was an AttributeError: no operation)
    finally:
        del os.environ["HPCCOLL_GPU_AWARE"]


class Interface:
    """An object exposing only ``__cuda_array_interface__`` (and optionally DLPack's device),
    over host memory: what CuPy arrays and PyTorch CUDA tensors look like to hpccoll."""

    def __init__(self, array, device_id=None, strides=None, read_only=False):
        self.array = array
        self.device_id = device_id
        self.__cuda_array_interface__ = {
            "shape": array.shape if strides is None else (array.size // 2,),
            "typestr": array.dtype.str, "strides": strides, "version": 3,
            "data": (array.ctypes.data, read_only)}
        if device_id is not None:
            self.__dlpack_device__ = lambda: (2, device_id)


class Parameter:
    """A PyTorch CUDA tensor that requires grad, as hpccoll sees one: its interface raises
    RuntimeError; ``detach()`` is the same memory with the interface."""

    def __init__(self, array):
        self.array = array

    @property
    def __cuda_array_interface__(self):
        raise RuntimeError("Can't get __cuda_array_interface__ on Variable that requires "
                           "grad. If gradients aren't required, use var.detach() to get "
                           "Variable that doesn't require grad.")

    def detach(self):
        return Interface(self.array)


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
    # a parameter that requires grad: broadcast through its detached view, in place
    weights = data(0, 50, "float32") if r == 0 else np.zeros(50, np.float32)
    for name in ("binomial", "native"):
        hpccoll.bcast(comm, Parameter(weights), algorithm=name)
        assert np.array_equal(weights, data(0, 50, "float32")), name
    hpccoll.Comm(comm).Bcast(Parameter(weights))
    assert np.array_equal(weights, data(0, 50, "float32"))


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
    # a Numba array (what hpccoll.Comm makes of any device buffer) made on GPU 0 while GPU 1
    # is current: the driver's answer for its memory, not the current device, says where
    from hpccoll.runtime import device
    current = device.current_device
    device.current_device = lambda: 1
    try:
        for run in (lambda: hpccoll.allreduce(comm, dev(values), result, algorithm="ring"),
                    lambda: hpccoll.Comm(comm).Allreduce(dev(values), result)):
            with pytest.raises(ValueError, match="on GPU 0 but the current device is GPU 1"):
                run()
    finally:
        device.current_device = current
    # a read-only receive buffer is refused, not written (hpccoll.Comm leaves it to MPI's
    # own call, which this MPI cannot take from device memory)
    frozen = Interface(np.full(n, 7, np.float32), read_only=True)
    with pytest.raises(ValueError, match="recvbuf is read-only"):
        hpccoll.allreduce(comm, dev(values), frozen, algorithm="ring")
    with pytest.raises(TypeError, match="a read-only buffer where MPI writes.*not GPU-aware"):
        hpccoll.Comm(comm).Allreduce(dev(values), frozen)
    assert np.all(frozen.array == 7)
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


def user_max():
    """A user-defined MPI op (the element-wise maximum of float64s): hpccoll.Comm hands a
    call with it to MPI's own collective.  The caller frees it."""
    from mpi4py import MPI
    return MPI.Op.Create(lambda a, b, datatype: np.maximum(
        np.frombuffer(a, np.float64), np.frombuffer(b, np.float64),
        out=np.frombuffer(b, np.float64)), commute=True)


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
    biggest = user_max()
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


@pytest.mark.mpi(ranks=[2], timeout=300)
def test_comm_hands_mpi_device_memory_after_its_producers_streams(mpi_ranks, comm):
    """hpccoll.Comm's hand-over to MPI's own collective (a user-defined op, IN_PLACE
    alltoall, Allgatherv with gaps between the blocks) with a GPU-aware MPI: before MPI
    reads and writes the device buffers, the calling thread waits for the work queued on
    their producers' streams (an event recorded on each, once per stream, waited for by the
    host), as for hpccoll's own calls, and never synchronizes the whole device; every call,
    the first and the same again.  (Not GPU-aware: a device buffer in a spec like a host
    buffer's before is refused, not handed to MPI as the repeat of a call MPI served.)"""
    import hpccoll
    from hpccoll.runtime import device
    from mpi4py import MPI
    from numba import cuda
    p, r = comm.size, comm.rank
    n = 512
    values = data(r, n, "float64")
    biggest = user_max()
    want = np.empty(n)
    comm.Allreduce(values, want, op=MPI.MAX)
    mine = np.arange(2.0 * p) + 10 * r
    exchanged = mine.copy()
    comm.Alltoall(MPI.IN_PLACE, exchanged)
    counts, displs = [3] * p, [5 * q for q in range(p)]          # gaps of 2
    gathered = np.full(5 * p, -1.0)
    comm.Allgatherv(values[:3], [gathered, counts, displs, MPI.DOUBLE])
    os.environ["HPCCOLL_GPU_AWARE"] = "0"
    try:                    # a spec's device buffer after a host one alike: checked again
        wrapped = hpccoll.Comm(comm)
        spread = bytearray(np.full(5 * p, -1.0).tobytes())
        wrapped.Allgatherv([bytearray(values[:3].tobytes()), MPI.DOUBLE],
                           [spread, counts, displs, MPI.DOUBLE])
        assert np.array_equal(np.frombuffer(spread), gathered)
        with pytest.raises(TypeError, match="not GPU-aware"):
            wrapped.Allgatherv([dev(values[:3]), MPI.DOUBLE],
                               [dev(np.full(5 * p, -1.0)), counts, displs, MPI.DOUBLE])
    finally:
        del os.environ["HPCCOLL_GPU_AWARE"]
    os.environ["HPCCOLL_GPU_AWARE"] = "1"
    try:
        wrapped = hpccoll.Comm(comm)
        with Watched(device._cuda()) as watched:
            producer, other = cuda.stream(), cuda.stream()

            def waits(*streams):
                return [step for on in streams for step in (("record", on),
                                                            "event synchronize")]
            for again in range(2):
                source = dev(values).bind(producer)
                result = dev(np.full(n, 7.0)).bind(other)
                watched.calls.clear()
                wrapped.Allreduce(source, result, op=biggest)
                assert watched.calls == waits(producer, other), (again, watched.calls)
                assert np.array_equal(host(result), want), again
                to_all = dev(mine).bind(producer)
                watched.calls.clear()
                wrapped.Alltoall(MPI.IN_PLACE, to_all)
                assert watched.calls == waits(producer), (again, watched.calls)
                assert np.array_equal(host(to_all), exchanged), again
                spread = dev(np.full(5 * p, -1.0)).bind(other)
                watched.calls.clear()
                wrapped.Allgatherv([dev(values[:3]).bind(producer), MPI.DOUBLE],
                                   [spread, counts, displs, MPI.DOUBLE])
                assert watched.calls == waits(producer, other), (again, watched.calls)
                assert np.array_equal(host(spread), gathered), again
    finally:
        del os.environ["HPCCOLL_GPU_AWARE"]
        biggest.Free()


@pytest.mark.mpi(ranks=[1], timeout=120)
def test_gpu_aware_detection_and_override(mpi_ranks, comm, caplog):
    from mpi4py import MPI
    from hpccoll.runtime import buffers
    try:
        query = ctypes.CDLL(MPI.__file__).MPIX_Query_cuda_support
        query.restype = ctypes.c_int
        library = bool(query())
    except AttributeError:
        library = False
    assert "HPCCOLL_GPU_AWARE" not in os.environ
    with caplog.at_level(logging.INFO, logger="hpccoll"):
        for _ in range(3):
            assert buffers.gpu_aware() is library
        for text, expected in (("1", True), ("yes", True), ("0", False), ("off", False)):
            os.environ["HPCCOLL_GPU_AWARE"] = text
            assert buffers.gpu_aware() is expected, text
    said = [record.getMessage() for record in caplog.records]
    assert len(said) == 3, said             # once for each decision, however often asked
    assert said[0].startswith("hpccoll: MPIX_Query_cuda_support() = ") and \
        "HPCCOLL_GPU_AWARE=" in said[0], said
    assert said[1:] == ["hpccoll: HPCCOLL_GPU_AWARE=1: device buffers go to MPI as they are",
                        "hpccoll: HPCCOLL_GPU_AWARE=0: device buffers are staged through "
                        "pinned host memory"]
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


@pytest.mark.mpi(ranks=[2], timeout=300)
def test_bench_staged_native_copies_only_what_the_collective_reads_and_writes(mpi_ranks,
                                                                              comm):
    """``hpccoll bench -d cuda``'s native call on staged device buffers copies what
    hpccoll's staging copies (prepared.staged_regions), not the whole buffers: the send
    buffer down, of the receive buffer only a broadcast root's input, and back only what the
    collective writes (nothing at a broadcast's root or a reduce's other rank)."""
    from hpccoll.tools import bench
    p, r = comm.size, comm.rank
    n = 1024                                  # bytes a block (float64)
    os.environ["HPCCOLL_GPU_AWARE"] = "0"
    try:
        expected = {"allgather": (n, n * p), "alltoall": (n * p, n * p),
                    "allreduce": (n, n), "reduce_scatter": (n, n // p),
                    "bcast": (n, 0) if r == 0 else (0, n),
                    "reduce": (n, n if r == 0 else 0)}
        for collective, (down, up) in expected.items():
            case = bench.Case(comm, collective, n, np.dtype(np.float64), memory="cuda")
            run = case.runner("native")
            assert case.wrong(run) == 0, collective
            with copies() as moved:
                run()
            assert moved == {"down": down, "up": up}, (collective, moved)
    finally:
        del os.environ["HPCCOLL_GPU_AWARE"]


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
