"""GPU (CUDA) memory, through Numba's CUDA layer.

Every device buffer hpccoll takes -- an object with ``__cuda_array_interface__`` (CuPy arrays,
PyTorch CUDA tensors, ...), one that exports DLPack from a CUDA device, or a Numba device
array -- is used as a Numba device array viewing the same memory (:func:`as_device`, no copy).
A PyTorch tensor that requires grad is read through its detached view (the same memory), and
the interface's read-only flag and the device the driver says the memory is on are honoured
(:func:`read_only`, :func:`device_id`).  Numba's CUDA simulator (``NUMBA_ENABLE_CUDASIM=1``) is
a device like any other here: its arrays (which expose no ``__cuda_array_interface__``) are
recognised by Numba's own types, so they take the real device path, with host memory that any
MPI can read standing in for GPU memory; that is how the device path is tested without a GPU.

The kernels that reduce and pack on the device are Numba CUDA kernels generated per op from the
scalar definitions the host kernels use (:func:`hpccoll.runtime.kernels.combine`), cached on
disk like the host kernels.  hpccoll's copies and kernels run on its own stream
(:func:`stream`) and wait for that stream only; adapted arrays are bound to the default
stream, so no Numba operation on them runs on the producer's stream by accident.  A call
starts after the work queued on its buffers' producers' streams (:func:`producer`), through an
event recorded there (:func:`wait_for_producers`), never a whole-device synchronize.
Scratch, staging and the mover's tables come from pools (:mod:`.pool`); staging copies only
the regions a call reads and writes (:func:`to_host`, :func:`to_device`).
"""

from __future__ import annotations

import ctypes
import sys
import threading
import warnings
from functools import lru_cache
from typing import Any, Callable

import numpy as np

from . import kernels, pool

THREADS = 256                        # threads per block of the kernels
DLPACK_CUDA = (2, 13)                # DLPack device types: kDLCUDA, kDLCUDAManaged
POINTER_DEVICE_ORDINAL = 9           # CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL
# numba-cuda's warning for launches of fewer than 128 blocks: most of hpccoll's segments
LOW_OCCUPANCY = r"Grid size \d+ will likely result in GPU under-utilization"
# float16 reductions: Numba's CUDA float16 arithmetic lacks MIN/MAX and the simulator's
# float16 differs from NumPy's rounding, so device reductions exclude it (staging reduces it)
UNREDUCED_DTYPES = (np.dtype(np.float16),)
# the __cuda_array_interface__'s stream handles of the default streams (0: Numba's default)
NUMBA_DEFAULT, LEGACY, PER_THREAD = 0, 1, 2
PRODUCER = "_hpccoll_producer"       # the attribute of an adapted array naming its producer


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


def cuda_interface(buf: Any) -> dict | None:
    """``buf.__cuda_array_interface__``, None where it has none.  A PyTorch tensor that
    requires grad refuses it (RuntimeError): its detached view, the same memory, gives it."""
    try:
        return buf.__cuda_array_interface__
    except AttributeError:
        return None
    except RuntimeError:
        detach = getattr(buf, "detach", None)
        if detach is None:
            raise
        return detach().__cuda_array_interface__


def is_device(buf: Any) -> bool:
    """Whether ``buf`` is GPU memory hpccoll takes (see the module doc)."""
    if is_numba_array(buf) or cuda_interface(buf) is not None:
        return True
    dlpack_device = getattr(buf, "__dlpack_device__", None)
    if dlpack_device is None or isinstance(buf, np.ndarray):
        return False
    try:
        return dlpack_device()[0] in DLPACK_CUDA
    except (TypeError, ValueError, RuntimeError):
        return False


def read_only(buf: Any) -> bool:
    """Whether the user's device buffer ``buf`` says its memory is read-only (the
    interface's ``data`` flag; Numba arrays and DLPack exports never are)."""
    found = None if is_numba_array(buf) else cuda_interface(buf)
    return found is not None and bool(found["data"][1])


def available() -> bool:
    """Whether a CUDA device (or the simulator) is there."""
    try:
        return bool(_cuda().is_available())
    except Exception:                  # a CUDA driver that fails to load is no device
        return False


def device_id(buf: Any) -> int:
    """The CUDA device of ``buf``'s memory: the driver's answer for its address
    (:func:`pointer_device`; a Numba array made while another device was current is on
    that one, and the simulator's give their host memory's DLPack), else DLPack's."""
    if is_numba_array(buf):
        return pointer_device(interface(buf)["data"][0])
    dlpack_device = getattr(buf, "__dlpack_device__", None)
    if dlpack_device is not None:
        return int(dlpack_device()[1])
    return pointer_device(cuda_interface(buf)["data"][0])


def pointer_device(at: int) -> int:
    """The device the driver says memory at ``at`` is on; the current one for no memory
    (address 0) or memory the driver does not know; 0 under the simulator (its only
    device)."""
    if simulated():
        return 0
    if at:
        ordinal = ctypes.c_int()
        if _libcuda().cuPointerGetAttribute(ctypes.byref(ordinal), POINTER_DEVICE_ORDINAL,
                                            ctypes.c_uint64(at)) == 0:
            return ordinal.value
    return current_device()


@lru_cache(maxsize=1)
def _libcuda() -> ctypes.CDLL:
    library = ctypes.CDLL("libcuda.so.1")
    library.cuPointerGetAttribute.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_uint64]
    return library


def current_device() -> int:
    return int(getattr(_cuda().gpus.current, "id", 0))


def as_device(buf: Any) -> Any:
    """A Numba device array viewing ``buf``'s memory (``buf`` itself if it is one); it keeps
    ``buf`` alive and names the stream its producer wrote it on (:func:`producer`).
    TypeError where the memory cannot be viewed."""
    if is_numba_array(buf):
        return buf
    found = cuda_interface(buf)
    if found is None:                # DLPack only: CuPy reads it and gives the interface
        try:
            import cupy
        except ImportError:
            raise TypeError(f"{type(buf).__name__} exports only DLPack: hpccoll reads DLPack "
                            "device arrays through CuPy (pip install cupy-cuda12x) or takes "
                            "objects with __cuda_array_interface__") from None
        buf = cupy.from_dlpack(buf)
        found = buf.__cuda_array_interface__
    array = from_interface(found, owner=buf)
    setattr(array, PRODUCER, _interface_producer(buf, found))
    return array


def _interface_producer(buf: Any, found: dict) -> int | None:
    """The stream handle the producer of ``buf`` (interface ``found``) says its work is on:
    the interface's ``stream`` where it has the key (None: nothing to wait for, as the
    interface defines it); PyTorch's current stream on the tensor's device for a tensor
    (whose interface has no such key); else the legacy default stream (an older producer
    says nothing: the stream it most likely used)."""
    if "stream" in found:
        return found["stream"]
    if type(buf).__module__.startswith("torch"):
        torch = sys.modules["torch"]
        return torch.cuda.current_stream(buf.device).cuda_stream or LEGACY
    return LEGACY


def producer(array: Any) -> Any:
    """What the work on the adapted ``array`` was queued on: the stream handle its interface
    gave (:func:`as_device`; None: nothing to wait for), else the Numba array's own stream
    (0: Numba's default stream)."""
    return getattr(array, PRODUCER, array.stream)


def buffer_producer(buf: Any) -> Any:
    """:func:`producer` of a user's device buffer as it is, not adapted (``hpccoll.Comm``'s
    hand-over to MPI's own collective): a Numba array's own stream, what its interface says
    (as :func:`as_device` reads it), the legacy default stream for a DLPack-only object."""
    if is_numba_array(buf):
        return buf.stream
    found = cuda_interface(buf)
    return LEGACY if found is None else _interface_producer(buf, found)


def wait_for_producers(arrays: Any, host: bool, of: Callable = producer) -> None:
    """Order what follows after the work queued so far on the producers' streams of
    ``arrays`` (None entries skipped; ``of`` says an array's stream), and that work only: an
    event recorded on each distinct producer stream, waited for by hpccoll's stream (its
    copies and kernels then follow it), or with ``host`` by the calling thread (MPI reads
    the memory itself).  No whole-device synchronize: the user's work on other streams goes
    on."""
    seen: list[Any] = []
    for array in arrays:
        if array is None:
            continue
        source = of(array)
        if source is None or any(source is s or source == s for s in seen):
            continue
        seen.append(source)
        event = _recorded(source)
        if host:
            event.synchronize()
        else:
            event.wait(stream())


@lru_cache(maxsize=None)
def _event(device: int, thread: int) -> Any:
    """The event of a thread on a device, made once and recorded again by every call (an
    event made and destroyed per call would join Numba's deferred deallocations, whose
    flush also frees memory, and a free synchronizes the device)."""
    module = _cuda()
    return module.event() if simulated() else module.event(timing=False)


def _recorded(source: Any) -> Any:
    """This thread's event recorded on the stream :func:`producer` named.  The simulator
    (one synchronous device, without stream handles or untimed events) records on a stream
    of its own for a handle."""
    module = _cuda()
    event = _event(current_device(), threading.get_ident())
    if simulated():
        event.record(module.stream() if isinstance(source, int) else source)
        return event
    if not isinstance(source, int):
        on = source
    elif source == NUMBA_DEFAULT:
        on = module.default_stream()
    elif source == LEGACY:
        on = module.legacy_default_stream()
    elif source == PER_THREAD:
        on = module.per_thread_default_stream()
    else:
        on = module.external_stream(source)
    event.record(on)
    return event


def from_interface(found: dict, owner: Any) -> Any:
    """The Numba device array of a ``__cuda_array_interface__`` (holding ``owner``; None:
    holding nothing), bound to the default stream whatever stream the interface names (Numba
    would bind the producer's, and copies on the array would run there, asynchronously).
    Under the simulator the pointer is host memory."""
    if not simulated():
        if found.get("stream") is not None:
            found = {**found, "stream": None}
        return _cuda().from_cuda_array_interface(found, owner=owner, sync=False)
    from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray
    dtype = np.dtype(found["typestr"])
    shape = tuple(found["shape"])
    count = int(np.prod(shape, dtype=np.int64))
    if count == 0:
        return FakeCUDAArray(np.empty(shape, dtype))
    strides = found.get("strides")
    if strides is None:
        return FakeCUDAArray(pool.host_view(found["data"][0], count, dtype, owner).reshape(shape))
    extent = sum((n - 1) * step for n, step in zip(shape, strides)) + dtype.itemsize
    memory = pool.host_view(found["data"][0], extent // dtype.itemsize, dtype, owner)
    return FakeCUDAArray(np.lib.stride_tricks.as_strided(memory, shape, strides))


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


def _device_view(at: int, count: int, dtype: np.dtype, owner: Any) -> Any:
    return from_interface({"shape": (count,), "typestr": dtype.str, "strides": None,
                           "data": (at, False), "version": 3}, owner)


def _pinned_block(nbytes: int) -> np.ndarray:
    return _cuda().pinned_array(nbytes, np.uint8)


def _empty_device(count: int, dtype: np.dtype) -> Any:
    return _cuda().device_array(count, dtype)


# device scratch and tables; page-locked host memory for staging (see the module doc)
DEVICE_POOL = pool.Pool(lambda nbytes: _empty_device(nbytes, np.uint8), address,
                        _device_view, _empty_device)
PINNED_POOL = pool.Pool(_pinned_block, lambda block: block.ctypes.data, pool.host_view,
                        np.empty)


def empty(count: int, dtype: np.dtype) -> Any:
    """``count`` elements of device memory (pooled)."""
    return DEVICE_POOL.take(count, dtype)


def upload(host: np.ndarray) -> Any:
    """A device copy of ``host``."""
    return _cuda().to_device(host)


def pinned(count: int, dtype: np.dtype) -> np.ndarray:
    """Page-locked host memory (staging; pooled, and none asked of the driver for no
    elements)."""
    return PINNED_POOL.take(count, dtype)


@lru_cache(maxsize=None)
def _stream(device: int) -> Any:
    return _cuda().stream()


def stream() -> Any:
    """hpccoll's own CUDA stream on the current device: its copies and kernels run there
    and wait for it alone (a stream Numba creates also waits for the legacy default
    stream's work)."""
    return _stream(current_device())


def to_host(array: Any, host: np.ndarray, regions: Any = None) -> None:
    """Copy the device ``array`` into the flat ``host`` (same size): all of it, or only the
    ``regions`` ((offset, count) pairs, in elements), and wait for the copies once."""
    _transfer(array, host, regions, "copy_to_host")


def to_device(host: np.ndarray, array: Any, regions: Any = None) -> None:
    """Copy the flat ``host`` into the device ``array`` (same size): all of it, or only the
    ``regions`` ((offset, count) pairs, in elements), and wait for the copies once."""
    _transfer(array, host, regions, "copy_to_device")


def _transfer(array: Any, host: np.ndarray, regions: Any, method: str) -> None:
    """The copies of :func:`to_host`/:func:`to_device` (``method``), on :func:`stream`."""
    if regions is None:
        regions = ((0, host.size),)
    pieces = [(offset, count) for offset, count in regions if count]
    if not pieces:
        return
    on = stream()
    flat = array.reshape(array.size)
    for offset, count in pieces:
        whole = offset == 0 and count == host.size
        memory = host if whole else host[offset:offset + count]
        getattr(flat if whole else flat[offset:offset + count], method)(memory, stream=on)
    on.synchronize()


def _launch(kernel: Callable, count: int, *arguments: Any) -> None:
    """Run ``kernel`` over ``count`` threads on :func:`stream` and wait for it, without
    numba-cuda's low-occupancy warning (a segment of a few blocks is what hpccoll means)."""
    threads = min(THREADS, count)
    on = stream()
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=LOW_OCCUPANCY)
        configured = kernel[(count + threads - 1) // threads, threads, on]
    configured(*arguments)
    on.synchronize()


def copy(dst: Any, src: Any) -> None:
    """``dst[:] = src`` between device arrays."""
    if dst.size:
        on = stream()
        dst.copy_to_device(src, stream=on)
        on.synchronize()


def reduces(op: str, dtype: np.dtype) -> bool:
    """Whether the device kernels reduce ``dtype`` (see :data:`UNREDUCED_DTYPES`)."""
    return np.dtype(dtype) not in UNREDUCED_DTYPES and kernels.applies(op, dtype)


@lru_cache(maxsize=1)
def _device_combine() -> None:
    """Make :func:`kernels.combine` known to Numba's CUDA target (the simulator runs the
    kernels in Python, where it is a plain function)."""
    if simulated():
        return
    try:                                   # numba-cuda: the CUDA target's own registry
        from numba.cuda.extending import overload
    except ImportError:                    # Numba's built-in CUDA target
        from functools import partial

        from numba.extending import overload as core_overload
        overload = partial(core_overload, target="cuda")
    kernels.register_combine(overload, cuda.jit(device=True))


@lru_cache(maxsize=None)
def _pairwise(op: str) -> Callable:
    """The kernel ``dst = a op b``: ``op`` a string constant of its closure, so that the
    disk cache's key (which includes the closure's contents) stays valid across runs."""
    _cuda()
    _device_combine()
    combine = kernels.combine

    @cuda.jit(cache=True)
    def pairwise(dst, a, b):
        i = cuda.grid(1)
        if i < dst.size:
            dst[i] = combine(op, a[i], b[i])
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

    @cuda.jit(cache=True)
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
    back, the block offsets uploaded once (into pooled device memory)."""
    at = np.concatenate(([0], np.cumsum(counts)[:-1])).astype(np.int64)
    return _move, (packed, buffer, _table(np.asarray(starts, np.int64)), _table(at), gather)


def _table(values: np.ndarray) -> Any:
    table = empty(values.size, np.int64)
    to_device(values, table)
    return table


def _move(packed: Any, buffer: Any, starts: Any, at: Any, gather: bool) -> None:
    if packed.size:
        _launch(_mover(), packed.size, packed, buffer, starts, at, gather)
