"""Device buffers on a real GPU: every collective and algorithm on CuPy arrays, Numba device
arrays and PyTorch CUDA tensors gives the bytes NumPy buffers give, staged through the host
and through the GPU-aware executor (device kernels, device copies, the block mover, device
pointers to MPI) where MPI reads GPU memory; MPI's own collective on CuPy managed memory
through hpccoll.Comm's hand-over, which a host-only MPI reads too; inputs produced on
a CuPy non-blocking stream and a PyTorch side stream; the issue-34 cases that need a driver.

Marked ``gpu``; they skip, saying why, without a CUDA GPU or under Numba's CUDA simulator
(which tests/mpi/test_device.py switches on for the whole pytest process: run this file on its
own, as perf/gpu_check.sh does, which fails if anything here skipped).  ``HPCCOLL_REHEARSAL=1``
runs them under the simulator (Numba arrays only): perf/gpu_check.sh --simulate.
"""

from __future__ import annotations

import os
import time

import numpy as np
import pytest

from device_cases import (Memory, numba_memory, run_every_collective,
                          run_nonblocking_and_persistent)
from mpi_cases import data

REHEARSAL = os.environ.get("HPCCOLL_REHEARSAL") == "1"


def _why_not() -> str | None:
    if os.environ.get("NUMBA_ENABLE_CUDASIM") == "1" and not REHEARSAL:
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


def _libraries() -> list[Memory]:
    """Every GPU array library installed (Numba's alone under the simulator)."""
    found = [numba_memory()]
    if REHEARSAL:
        return found
    try:
        import cupy
        found.append(Memory("cupy", cupy.asarray, cupy.asnumpy, lambda a, v: a.set(v)))
    except ImportError:
        pass
    try:
        import torch
        if torch.cuda.is_available():
            found.append(Memory("torch", lambda a: torch.from_numpy(a).cuda(),
                                lambda t: t.cpu().numpy(),
                                lambda t, v: t.copy_(torch.from_numpy(v))))
    except ImportError:
        pass
    return found


def _managed() -> Memory:
    """CuPy arrays in managed memory (the test's arrays are a few KiB; the simulator's
    memory is host memory): MPI's own collective reads them where MPI is host-only."""
    if REHEARSAL:
        return numba_memory()
    import cupy

    def to_gpu(values: np.ndarray):
        memory = cupy.cuda.malloc_managed(max(values.nbytes, 1))
        array = cupy.ndarray(values.shape, values.dtype, memptr=memory)
        array.set(values)
        return array
    return Memory("cupy managed", to_gpu, cupy.asnumpy, lambda a, v: a.set(v))


def _paths(comm):
    """(path, communicator, memories): staged, for every library; the GPU-aware executor,
    for every library, where MPI reads device memory (or under the simulator, whose device
    memory is host memory).  Not on managed memory with a host-only MPI: the executor's
    scratch is device memory, which such an MPI cannot read (a segmentation fault, seen on
    an H100 on 2026-11-27)."""
    from hpccoll.runtime import buffers
    os.environ["HPCCOLL_GPU_AWARE"] = "0"
    yield "staged", comm.Dup(), _libraries()
    if REHEARSAL or buffers.library_gpu_aware():
        os.environ["HPCCOLL_GPU_AWARE"] = "1"
        yield "gpu-aware", comm.Dup(), _libraries()
    else:
        print("test_gpu: MPI does not read GPU memory: the GPU-aware executor is not run")
    del os.environ["HPCCOLL_GPU_AWARE"]


@pytest.mark.mpi(ranks=[1, 2], timeout=600)
def test_every_collective_on_gpu_memory(mpi_ranks, comm):
    p, r = comm.size, comm.rank
    for path, duplicate, memories in _paths(comm):
        for memory in memories:
            what = f"{path} {memory.name}"
            run_every_collective(duplicate, what, p, r, memory)
            run_nonblocking_and_persistent(comm, duplicate, what, r, memory)


@pytest.mark.mpi(ranks=[2], timeout=300)
def test_inputs_made_on_other_streams_and_the_issue_34_cases(mpi_ranks, comm):
    """The call waits for the stream that produced its input (a CuPy non-blocking stream, a
    PyTorch side stream); a reduce's other rank stages nothing (no pinned memory of 0
    bytes); a parameter that requires grad is broadcast; device memory to MPI's own call
    with an MPI that is not GPU-aware is a TypeError, not a crash."""
    import hpccoll
    from mpi4py import MPI
    r = comm.rank
    n = 1 << 20
    want = np.zeros(n, np.float32)
    comm.Allreduce(np.full(n, r + 1, np.float32), want)
    for memory in _libraries():
        got = memory.to_gpu(np.zeros(n, np.float32))
        if memory.name == "cupy":
            import cupy
            with cupy.cuda.Stream(non_blocking=True):
                made = cupy.zeros(n, np.float32)
                for _ in range(50):                  # long enough to be still running
                    made += (r + 1) / 50
                made = cupy.rint(made)
                hpccoll.allreduce(comm, made, got, algorithm="ring")
        elif memory.name == "torch":
            import torch
            with torch.cuda.stream(torch.cuda.Stream()):
                made = torch.zeros(n, device="cuda")
                for _ in range(50):
                    made += (r + 1) / 50
                made = torch.round(made)
                hpccoll.allreduce(comm, made, got, algorithm="ring")
            torch.cuda.synchronize()
        else:
            hpccoll.allreduce(comm, memory.to_gpu(np.full(n, r + 1, np.float32)), got)
        assert np.array_equal(memory.to_host(got), want), memory.name
        os.environ["HPCCOLL_GPU_AWARE"] = "0"
        try:
            staged = comm.Dup()
            values = data(r, 1000, "float64")
            total = np.zeros_like(values)
            comm.Reduce(values, total, root=0)
            into = memory.to_gpu(np.zeros_like(values))
            hpccoll.reduce(staged, memory.to_gpu(values), into, root=0, algorithm="binomial")
            if r == 0:
                assert np.array_equal(memory.to_host(into), total), memory.name
            if memory.name == "torch":
                import torch
                weights = torch.nn.Parameter(memory.to_gpu(data(r, 64, "float32")))
                hpccoll.bcast(staged, weights, root=1)
                assert np.array_equal(memory.to_host(weights.detach()), data(1, 64, "float32"))
            if not REHEARSAL:
                biggest = MPI.Op.Create(lambda a, b, t: None, commute=True)
                with pytest.raises(TypeError, match="not GPU-aware"):
                    hpccoll.Comm(staged).Allreduce(memory.to_gpu(values), into, op=biggest)
                biggest.Free()
        finally:
            del os.environ["HPCCOLL_GPU_AWARE"]


class ReadOnly:
    """A device array's memory behind an interface that says it is read-only."""

    def __init__(self, array):
        from hpccoll.runtime import device
        self.array = array
        found = dict(device.interface(numba_view(array)))
        self.__cuda_array_interface__ = {**found, "data": (found["data"][0], True)}


@pytest.mark.mpi(ranks=[2], timeout=300)
def test_streamed_read_only_and_mpis_own_call_on_gpu_memory(mpi_ranks, comm):
    """Item 2 of issue 34: allgather_stream on staged device arrays: each yielded slice is
    final on the device when it is yielded.  Item 6: a read-only receive buffer is refused,
    not written.  hpccoll.Comm's hand-over to MPI's own collective (a user-defined op) on
    GPU-aware managed memory gives MPI's result once the work on the input's producer stream
    (a CuPy non-blocking stream still computing it) is done."""
    import hpccoll
    from mpi4py import MPI
    p, r = comm.size, comm.rank
    n = 1 << 16
    block = data(r, n, "float32")
    want = np.zeros(n * p, np.float32)
    comm.Allgather(block, want)
    os.environ["HPCCOLL_GPU_AWARE"] = "0"
    try:
        staged = comm.Dup()
        for memory in _libraries():
            gathered = memory.to_gpu(np.zeros(n * p, np.float32))
            for arrived in hpccoll.allgather_stream(staged, memory.to_gpu(block), gathered):
                now = memory.to_host(gathered)
                for _, where in arrived:
                    assert np.array_equal(now[where], want[where]), (memory.name, where)
            frozen = ReadOnly(memory.to_gpu(np.full(n, 7, np.float32)))
            with pytest.raises(ValueError, match="recvbuf is read-only"):
                hpccoll.allreduce(staged, memory.to_gpu(block), frozen, algorithm="ring")
            assert np.all(memory.to_host(frozen.array) == 7), memory.name
    finally:
        del os.environ["HPCCOLL_GPU_AWARE"]
    biggest = MPI.Op.Create(lambda a, b, datatype: np.maximum(
        np.frombuffer(a, np.float64), np.frombuffer(b, np.float64),
        out=np.frombuffer(b, np.float64)), commute=True)
    most = np.zeros(n)
    comm.Allreduce(np.full(n, float(r + 1)), most, op=MPI.MAX)
    os.environ["HPCCOLL_GPU_AWARE"] = "1"
    try:
        wrapped = hpccoll.Comm(comm.Dup())
        managed = _managed()
        result = managed.to_gpu(np.zeros(n))
        made = managed.to_gpu(np.zeros(n))
        if REHEARSAL:
            managed.fill(made, np.full(n, float(r + 1)))
            wrapped.Allreduce(made, result, op=biggest)
        else:
            import cupy
            with cupy.cuda.Stream(non_blocking=True):
                for _ in range(50):                  # long enough to be still running
                    made += (r + 1) / 50
                cupy.rint(made, out=made)
                wrapped.Allreduce(made, result, op=biggest)
        assert np.array_equal(managed.to_host(result), most)
    finally:
        del os.environ["HPCCOLL_GPU_AWARE"]
        biggest.Free()


@pytest.mark.mpi(ranks=[2], timeout=300)
def test_a_call_does_not_wait_for_work_on_other_streams(mpi_ranks, comm):
    """Item 8 of issue 34: a call waits for the stream that produced its buffers, not for the
    whole device: a kernel sleeping about a second on another stream is still running when
    an allreduce on buffers of a third stream returns (a whole-device synchronize would
    have waited for it), staged and GPU-aware (where MPI reads GPU memory).  Under the simulator, whose
    work is synchronous, the values only."""
    import hpccoll
    from numba import cuda
    r = comm.rank
    n = 1 << 16
    values = data(r, n, "float32")
    want = np.zeros_like(values)
    comm.Allreduce(values, want)

    @cuda.jit
    def sleep(repeats):
        for _ in range(repeats):
            cuda.nanosleep(500000)
    mine, busy = cuda.stream(), cuda.stream()
    for path, duplicate, memories in _paths(comm):
        memory = memories[0]
        source = numba_view(memory.to_gpu(values)).bind(mine)
        got = numba_view(memory.to_gpu(np.zeros_like(values))).bind(mine)
        for _ in range(2):          # pools, kernels, and the repeated call's compiled executor
            hpccoll.allreduce(duplicate, source, got, algorithm="ring")
        if not REHEARSAL:
            sleep[1, 1, busy](0)                        # (compiled before the clock runs)
            busy.synchronize()
            went = cuda.event()
            went.record(busy)
            sleep[1, 1, busy](2000)                     # about 1 s (0.5 ms a nap, or less)
            asleep = cuda.event()
            asleep.record(busy)
        began = time.perf_counter()
        hpccoll.allreduce(duplicate, source, got, algorithm="ring")
        if not REHEARSAL:
            took = time.perf_counter() - began
            running = not asleep.query()
            busy.synchronize()
            slept = cuda.event_elapsed_time(went, asleep) / 1e3
            assert running, (path, memory.name, f"the call ({took:.3f} s) waited for another "
                             f"stream's work (a kernel of {slept:.3f} s)")
        assert np.array_equal(got.copy_to_host(), want), (path, memory.name)


def numba_view(array):
    """A Numba device array of ``array`` (itself where it is one)."""
    from numba import cuda
    return array if hasattr(array, "bind") else cuda.as_cuda_array(array)


def test_device_kernels_on_gpu_memory_match_the_host_kernels():
    from numba import cuda
    from hpccoll.runtime import device, kernels
    rng = np.random.default_rng(5)
    size = 1003 if REHEARSAL else 100003
    for dtype in ["float32", "float64", "int32", "uint64", "complex128"]:
        a = rng.integers(0, 4, size).astype(dtype)
        b = rng.integers(0, 4, size).astype(dtype)
        for op in kernels.OPS:
            if kernels.applies(op, dtype):
                want = np.empty_like(a)
                kernels.reducer(op, dtype)(want, a, b)
                got = cuda.to_device(np.zeros_like(a))
                device.reduction(op).pair(got, cuda.to_device(a), cuda.to_device(b))
                assert np.array_equal(got.copy_to_host(), want), (op, dtype)
