"""The measurements of perf/gpu_check.sh, one per run:

    python perf/gpu_check.py compile            # one process, no MPI job
    mpiexec -n 2 python perf/gpu_check.py latency
    mpiexec -n 2 python perf/gpu_check.py waits

``compile``: seconds of a process's first and second device reduction and block move (the
first compiles the CUDA kernels, or loads them from Numba's disk cache: run it twice, the
cache empty and then full).  ``latency``: the median time of an 8-byte allreduce (ring and
MPI's own) on host NumPy arrays and on device arrays, staged, and GPU-aware where MPI reads GPU
memory, over 1,000 calls after 100 warm-up calls.  ``waits``: what a staged ring allreduce waits for while
a kernel sleeps on another stream of the same process: every function (Python or C) of the call
that took over 0.2 s, innermost first, with the sleeping kernel's state after the call.
"""

from __future__ import annotations

import os
import sys
import time

import numpy as np


def compile_times() -> None:
    from numba import cuda

    from hpccoll.runtime import device
    a = cuda.to_device(np.arange(4096, dtype=np.float32))
    packed = cuda.to_device(np.zeros(16, np.float32))
    for attempt in ("first", "second"):
        began = time.perf_counter()
        device.reduction("sum").pair(a, a, a)
        move, arguments = device.block_mover(packed, a, np.array([0, 2048]),
                                             np.array([8, 8]), gather=True)
        move(*arguments)
        print(f"gpu_check: {attempt} device reduction and block move: "
              f"{time.perf_counter() - began:.3f} s", flush=True)


def _median_us(comm, run) -> float:
    for _ in range(100):
        run()
    times = np.empty(1000)
    for i in range(times.size):
        comm.Barrier()
        began = time.perf_counter()
        run()
        times[i] = time.perf_counter() - began
    return float(np.median(times)) * 1e6


def latency() -> None:
    from mpi4py import MPI
    from numba import cuda

    import hpccoll
    from hpccoll.runtime import buffers
    comm = MPI.COMM_WORLD
    memories = [("host", lambda v: v), ("numba", cuda.to_device)]
    try:
        import cupy
        memories.append(("cupy", cupy.asarray))
    except ImportError:
        pass
    for aware in ("0", "1") if buffers.library_gpu_aware() else ("0",):
        os.environ["HPCCOLL_GPU_AWARE"] = aware
        duplicate = comm.Dup()
        for name, to_memory in memories:
            if name == "host" and aware == "1":
                continue
            send, recv = to_memory(np.ones(1)), to_memory(np.zeros(1))
            for algorithm in ("ring", "native"):
                us = _median_us(comm, lambda: hpccoll.allreduce(duplicate, send, recv,
                                                                algorithm=algorithm))
                if comm.rank == 0:
                    path = "" if name == "host" else (" gpu-aware" if aware == "1"
                                                      else " staged")
                    print(f"gpu_check: 8 B allreduce on {comm.size} rank(s), {name}{path}, "
                          f"{algorithm}: {us:.1f} us", flush=True)
        duplicate.Free()


def _slow_calls(run, seconds: float = 0.2) -> list[str]:
    """``run()``'s function calls that took over ``seconds``, in the order they returned."""
    began: dict = {}
    slow: list[str] = []

    def profile(frame, event, arg):
        c_function = event.startswith("c_")
        key = (id(frame), id(arg) if c_function else None)
        if event in ("call", "c_call"):
            began[key] = time.perf_counter()
        elif key in began:
            took = time.perf_counter() - began.pop(key)
            if took > seconds:
                name = (getattr(arg, "__qualname__", repr(arg)) if c_function
                        else f"{frame.f_code.co_filename}:{frame.f_lineno} {frame.f_code.co_qualname}")
                slow.append(f"{took:.3f} s {name}")
    sys.setprofile(profile)
    try:
        run()
    finally:
        sys.setprofile(None)
    return slow


def waits() -> None:
    from mpi4py import MPI
    from numba import cuda

    import hpccoll
    comm = MPI.COMM_WORLD
    os.environ["HPCCOLL_GPU_AWARE"] = "0"
    duplicate = comm.Dup()

    @cuda.jit
    def sleep(repeats):
        for _ in range(repeats):
            cuda.nanosleep(500000)
    mine, busy = cuda.stream(), cuda.stream()
    values = np.arange(1 << 16, dtype=np.float32)
    source = cuda.to_device(values, stream=mine)
    got = cuda.device_array_like(values, stream=mine)
    mine.synchronize()
    for algorithm in ("ring", "native"):
        for _ in range(2):          # pools, kernels, and the repeated call's compiled executor
            hpccoll.allreduce(duplicate, source, got, algorithm=algorithm)
        sleep[1, 1, busy](0)
        busy.synchronize()
        sleep[1, 1, busy](1000)
        asleep = cuda.event()
        asleep.record(busy)
        comm.Barrier()
        began = time.perf_counter()
        slow = _slow_calls(lambda: hpccoll.allreduce(duplicate, source, got,
                                                     algorithm=algorithm))
        took = time.perf_counter() - began
        state = "still running" if not asleep.query() else "done"
        busy.synchronize()
        for line in [f"staged {algorithm} allreduce of 256 KiB: {took:.3f} s, the kernel on the "
                     f"other stream {state} after it"] + slow:
            print(f"gpu_check: rank {comm.rank} of {comm.size}: {line}", flush=True)
        comm.Barrier()
    duplicate.Free()


if __name__ == "__main__":
    {"compile": compile_times, "latency": latency, "waits": waits}[sys.argv[1]]()
