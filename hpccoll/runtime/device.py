"""GPU (CUDA) memory, through Numba's CUDA layer.

Every device buffer hpccoll takes -- an object with ``__cuda_array_interface__`` (CuPy arrays,
PyTorch CUDA tensors, ...), one that exports DLPack from a CUDA device, or a Numba device
array -- is used as a Numba device array viewing the same memory (:func:`as_device`, no copy).
Numba's CUDA simulator (``NUMBA_ENABLE_CUDASIM=1``) is a device like any other here: its
arrays (which expose no ``__cuda_array_interface__``) are recognised by Numba's own types, so
they take the real device path, with host memory that any MPI can read standing in for GPU
memory; that is how the device path is tested on machines without a GPU.

The kernels that reduce and pack on the device are Numba CUDA kernels generated per op from the
scalar definitions the host kernels use (:data:`hpccoll.runtime.kernels.SCALARS`).  Each device
operation here waits for its kernel (a whole-device synchronisation), so MPI never reads memory
a kernel is still writing.
"""

from __future__ import annotations

import ctypes
from functools import lru_cache
from typing import Any, Callable

import numpy as np

from . import kernels

THREADS = 256                        # threads per block of the kernels
DLPACK_CUDA = (2, 13)                # DLPack device types: kDLCUDA, kDLCUDAManaged
# float16 reductions: Numba's CUDA float16 arithmetic lacks MIN/MAX and the simulator's
# float16 differs from NumPy's rounding, so device reductions exclude it (staging reduces it)
REDUCED_KINDS = "iufcb"
UNREDUCED_DTYPES = (np.dtype(np.float16),)


cuda: Any = None        # numba.cuda, imported on first use; a global so the simulator finds it


def _cuda() -> Any:
    global cuda
    if cuda is None:
        from numba import cuda as module
        cuda = module
    return cuda


def simulated() -> bool:
    """Whether Numba's CUDA simulator stands in for the GPU (``NUMBA_ENABLE_CUDASIM=1``)."""
    from numba import config
    return bool(config.ENABLE_CUDASIM)


@lru_cache(maxsize=1)
def _array_types() -> tuple[type, ...]:
    if simulated():
        from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray
        return (FakeCUDAArray,)
    from numba.cuda.cudadrv.devicearray import DeviceNDArrayBase
    return (DeviceNDArrayBase,)


def is_numba_array(buf: Any) -> bool:
    """Whether ``buf`` is a Numba device array (the simulator's included)."""
    return type(buf).__module__.startswith("numba") and isinstance(buf, _array_types())


def is_device(buf: Any) -> bool:
    """Whether ``buf`` is GPU memory hpccoll takes (see the module doc)."""
    if is_numba_array(buf) or hasattr(buf, "__cuda_array_interface__"):
        return True
    dlpack_device = getattr(buf, "__dlpack_device__", None)
    if dlpack_device is None or isinstance(buf, np.ndarray):
        return False
    try:
        return dlpack_device()[0] in DLPACK_CUDA
    except (TypeError, ValueError, RuntimeError):
        return False


def available() -> bool:
    """Whether a CUDA device (or the simulator) is there."""
    try:
        return bool(_cuda().is_available())
    except Exception:                  # a CUDA driver that fails to load is no device
        return False


def device_id(buf: Any) -> int:
    """The CUDA device of ``buf``'s memory: DLPack's where the object says, else the current
    device (Numba device arrays live on the context that made them)."""
    dlpack_device = getattr(buf, "__dlpack_device__", None)
    if dlpack_device is not None:
        return int(dlpack_device()[1])
    return current_device()


def current_device() -> int:
    return int(getattr(_cuda().gpus.current, "id", 0))


def as_device(buf: Any) -> Any:
    """A Numba device array viewing ``buf``'s memory (``buf`` itself if it is one); it keeps
    ``buf`` alive.  TypeError where the memory cannot be viewed."""
    if is_numba_array(buf):
        return buf
    interface = getattr(buf, "__cuda_array_interface__", None)
    if interface is None:            # DLPack only: CuPy reads it and gives the interface
        try:
            import cupy
        except ImportError:
            raise TypeError(f"{type(buf).__name__} exports only DLPack: hpccoll reads DLPack "
                            "device arrays through CuPy (pip install cupy-cuda12x) or takes "
                            "objects with __cuda_array_interface__") from None
        buf = cupy.from_dlpack(buf)
        interface = buf.__cuda_array_interface__
    return from_interface(interface, owner=buf)


def from_interface(interface: dict, owner: Any) -> Any:
    """The Numba device array of a ``__cuda_array_interface__`` (holding ``owner``; None:
    holding nothing).  Under the simulator the pointer is host memory."""
    if not simulated():
        return _cuda().from_cuda_array_interface(interface, owner=owner, sync=False)
    from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray
    dtype = np.dtype(interface["typestr"])
    shape = tuple(interface["shape"])
    count = int(np.prod(shape, dtype=np.int64))
    address = interface["data"][0]
    if count == 0:
        return FakeCUDAArray(np.empty(shape, dtype))
    strides = interface.get("strides")
    extent = count * dtype.itemsize if strides is None else \
        sum((n - 1) * step for n, step in zip(shape, strides)) + dtype.itemsize
    memory = (ctypes.c_char * extent).from_address(address)
    memory.owner = owner                # the NumPy view holds the memory, which holds this
    array = np.frombuffer(memory, dtype, count if strides is None else -1)
    array = array.reshape(shape) if strides is None else \
        np.lib.stride_tricks.as_strided(array, shape, strides)
    return FakeCUDAArray(array)


def interface(array: Any) -> dict:
    """The ``__cuda_array_interface__`` of a Numba device array (the simulator's included)."""
    if simulated():
        host = array._ary
        return {"shape": host.shape, "typestr": host.dtype.str, "version": 3,
                "strides": None if host.flags.c_contiguous else host.strides,
                "data": (host.ctypes.data if host.size else 0, False)}
    return array.__cuda_array_interface__


def contiguous(array: Any) -> bool:
    return array.size == 0 or array.is_c_contiguous()


def address(array: Any) -> int:
    return interface(array)["data"][0]


def borrowed(array: Any) -> Any:
    """A 1-D view of ``array``'s memory that does not keep it alive."""
    flat = array.reshape(array.size)
    if flat.size == 0:
        return empty(0, array.dtype)
    return from_interface(interface(flat), owner=None)


def empty(count: int, dtype: np.dtype) -> Any:
    return _cuda().device_array(count, dtype)


def upload(host: np.ndarray) -> Any:
    """A device copy of ``host``."""
    return _cuda().to_device(host)


def pinned(count: int, dtype: np.dtype) -> np.ndarray:
    """Page-locked host memory (staging)."""
    return _cuda().pinned_array(count, dtype)


def to_host(array: Any, host: np.ndarray) -> None:
    """Copy the device ``array`` into ``host`` (same size)."""
    if host.size:
        array.reshape(array.size).copy_to_host(host)


def to_device(host: np.ndarray, array: Any) -> None:
    """Copy ``host`` into the device ``array`` (same size)."""
    if host.size:
        array.reshape(array.size).copy_to_device(host)


def synchronize() -> None:
    """Wait for all work on the current device (every stream: the user's too)."""
    _cuda().synchronize()


def _launch(kernel: Callable, count: int, *arguments: Any) -> None:
    threads = min(THREADS, count)
    kernel[(count + threads - 1) // threads, threads](*arguments)
    synchronize()


def copy(dst: Any, src: Any) -> None:
    """``dst[:] = src`` between device arrays."""
    if dst.size:
        dst.copy_to_device(src)
        synchronize()


def reduces(op: str, dtype: np.dtype) -> bool:
    """Whether the device kernels reduce ``dtype`` (see :data:`UNREDUCED_DTYPES`)."""
    return np.dtype(dtype) not in UNREDUCED_DTYPES and kernels.applies(op, dtype)


@lru_cache(maxsize=None)
def _pairwise(op: str) -> Callable:
    _cuda()
    combine = cuda.jit(device=True)(kernels.SCALARS[op])

    @cuda.jit
    def pairwise(dst, a, b):
        i = cuda.grid(1)
        if i < dst.size:
            dst[i] = combine(a[i], b[i])
    return pairwise


def reduction(op: str) -> kernels.Reduction:
    """The device :class:`~hpccoll.runtime.kernels.Reduction` of ``op``: ``dst = a op b``."""
    kernel = _pairwise(op)

    def pair(dst: Any, a: Any, b: Any) -> None:
        if dst.size:
            _launch(kernel, dst.size, dst, a, b)
    return kernels.Reduction(pair)


@lru_cache(maxsize=1)
def _mover() -> Callable:
    _cuda()

    @cuda.jit
    def move(packed, buffer, starts, at, gather):
        # packed[i] <-> buffer[starts[k] + i - at[k]] for the block k holding packed element
        # i: the last k with at[k] <= i (blocks of no elements share their at with the next)
        i = cuda.grid(1)
        if i < packed.size:
            low, high = 0, at.size - 1
            while low < high:
                middle = (low + high + 1) // 2
                if at[middle] <= i:
                    low = middle
                else:
                    high = middle - 1
            j = starts[low] + i - at[low]
            if gather:
                packed[i] = buffer[j]
            else:
                buffer[j] = packed[i]
    return move


def block_mover(packed: Any, buffer: Any, starts: np.ndarray, counts: np.ndarray,
                gather: bool) -> tuple[Callable, tuple]:
    """The device form of :func:`hpccoll.runtime.kernels.block_mover`: one kernel launch that
    gathers the blocks ``buffer[starts[k]:][:counts[k]]`` into ``packed`` or spreads them
    back, the block offsets uploaded once."""
    at = np.concatenate(([0], np.cumsum(counts)[:-1])).astype(np.int64)
    upload = _cuda().to_device
    return _move, (packed, buffer, upload(np.asarray(starts, np.int64)), upload(at), gather)


def _move(packed: Any, buffer: Any, starts: Any, at: Any, gather: bool) -> None:
    if packed.size:
        _launch(_mover(), packed.size, packed, buffer, starts, at, gather)
