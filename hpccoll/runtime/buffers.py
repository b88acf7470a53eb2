"""User buffers: host or GPU memory, their MPI datatypes, and GPU-aware MPI detection.

Everything the executor needs to know about an array goes through here.  :func:`adapt` turns a
user's buffer into the array hpccoll works on, viewing the same memory (never a copy): a NumPy
array for host memory (NumPy arrays, PyTorch CPU tensors, anything with the buffer protocol),
a Numba device array for GPU memory (see :mod:`.device`).  The rest answers, for either kind:
its flat view, its address, who owns its memory (for the persistent-request cache), how to
allocate beside it and how to compute on it.  Device buffers go to MPI directly when the MPI
library is GPU-aware, otherwise through pinned host copies (see :func:`gpu_aware`).
"""

from __future__ import annotations

import ctypes
import logging
import weakref
from functools import lru_cache
from typing import Any, Callable

import numpy as np
from mpi4py import MPI

from .. import settings
from ..collectives import SUPPORTED_DTYPES
from . import device, kernels, pool

HOST, DEVICE = "host", "device"
log = logging.getLogger("hpccoll")
# how device buffers reach MPI, as the log says it (gpu_aware)
DIRECT, STAGED = "go to MPI as they are", "are staged through pinned host memory"


# the MPI op of each reduction hpccoll runs (SUM for "sum", ...)
def _mpi_ops() -> dict[str, MPI.Op]:
    return {name: getattr(MPI, name.upper()) for name in kernels.OPS}


MPI_OPS = _mpi_ops()
_OP_HANDLES = {op.handle: name for name, op in MPI_OPS.items()}
# MPI defines LAND, LOR and LXOR for C_BOOL but no bitwise op: on booleans they are the same
BOOLEAN_TWINS = {"band": "land", "bor": "lor", "bxor": "lxor"}


def adapt(buf: Any, name: str) -> Any:
    """The array hpccoll works on for the user's ``buf`` (same memory): a NumPy array, or a
    Numba device array for GPU memory; TypeError for anything else."""
    if isinstance(buf, np.ndarray):
        return buf
    if device.is_device(buf):
        return device.as_device(buf)
    if type(buf).__module__.startswith("mpi4py"):      # MPI.IN_PLACE, MPI.BOTTOM: not memory
        raise TypeError(f"{name} must be an array, got {buf!r}")
    if type(buf).__module__.startswith("torch"):       # a CPU tensor: NumPy shares its memory
        try:
            return buf.numpy()
        except RuntimeError as error:
            raise TypeError(f"{name}: {error}") from None
    try:
        return np.asarray(memoryview(buf))
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be an array (NumPy, a PyTorch tensor, anything with the "
                        "buffer protocol, or GPU memory: __cuda_array_interface__, DLPack, "
                        f"Numba device arrays), got {type(buf).__name__}") from None


def kind(array: Any) -> str:
    """:data:`HOST` or :data:`DEVICE` for an array :func:`adapt` returned."""
    return HOST if isinstance(array, np.ndarray) else DEVICE


def key(buf: Any) -> tuple | None:
    """What validation reads from a user's buffer that is not a NumPy array, cheaply, for
    the call cache (with the GPU it is on and the current one); None: not cacheable."""
    if device.is_numba_array(buf):
        return (type(buf), buf.dtype, buf.shape, device.contiguous(buf),
                device.current_device())
    interface = device.cuda_interface(buf)
    if interface is None:
        return None
    return (type(buf), interface["typestr"], tuple(interface["shape"]),
            interface.get("strides"), interface["data"][1], device.device_id(buf),
            device.current_device())


def check_array(buf: Any, name: str, *, writable: bool) -> None:
    """TypeError/ValueError if the adapted ``buf`` cannot be a collective's buffer."""
    if buf.dtype not in SUPPORTED_DTYPES:
        supported = ", ".join(str(d) for d in SUPPORTED_DTYPES)
        raise TypeError(f"{name} has dtype {buf.dtype}, which is not supported ({supported})")
    if isinstance(buf, np.ndarray):
        if not buf.flags.c_contiguous:
            raise ValueError(f"{name} must be C-contiguous (pass np.ascontiguousarray(...))")
        if writable and not buf.flags.writeable:
            raise ValueError(f"{name} is read-only")
        return
    if not device.contiguous(buf):
        raise ValueError(f"{name} is a non-contiguous device array: pass a C-contiguous one "
                         "(e.g. cupy.ascontiguousarray(...), tensor.contiguous())")


def check_device(raw: Any, name: str, *, writable: bool) -> None:
    """ValueError if the GPU memory ``raw`` (the user's object) is on another device than
    the current one (on which hpccoll allocates and launches its kernels), or read-only (its
    ``__cuda_array_interface__`` says so) where the collective writes it."""
    if writable and device.read_only(raw):
        raise ValueError(f"{name} is read-only (its __cuda_array_interface__ says so)")
    where, current = device.device_id(raw), device.current_device()
    if where != current:
        raise ValueError(f"{name} is on GPU {where} but the current device is GPU {current}: "
                         "make its device current (cupy.cuda.Device(i).use(), "
                         "torch.cuda.set_device(i), numba.cuda.select_device(i)) or move it")


def flat(buf: Any) -> Any:
    """The 1-D view of a C-contiguous array."""
    return buf.reshape(-1) if isinstance(buf, np.ndarray) else buf.reshape(buf.size)


def borrowed(buf: Any) -> Any:
    """The 1-D view of ``buf``'s memory that does not keep ``buf`` alive (for cached
    bindings: whoever uses it must hold ``buf`` meanwhile, and check :func:`owner_ref`)."""
    if not isinstance(buf, np.ndarray):
        return device.borrowed(buf)
    view = flat(buf)
    if view.nbytes == 0:
        return view[:0].copy()
    return pool.host_view(view.ctypes.data, view.size, view.dtype, None)


def empty(like: str, count: int, dtype: np.dtype) -> Any:
    """``count`` elements of ``dtype`` in the memory of kind ``like``."""
    return np.empty(count, dtype) if like == HOST else device.empty(count, dtype)


def address(buf: Any) -> int:
    if isinstance(buf, np.ndarray):
        return MPI.buffer(buf).address
    return device.address(buf)


def owner(buf: Any) -> Any:
    """The object that owns ``buf``'s memory (the end of its ``.base`` chain, through the
    exporter of a memoryview: a NumPy view of a bytearray or array.array is owned by it)."""
    obj = buf
    while True:
        if isinstance(obj, memoryview):
            obj = obj.obj
        elif getattr(obj, "base", None) is not None:
            obj = obj.base
        else:
            return obj


def owner_ref(buf: Any, released: Callable[[Any], None] | None = None
              ) -> Callable[[], Any]:
    """A weak reference to the owner of ``buf``'s memory (calling ``released`` with it when
    the owner dies, while the reference lives), or a strong one where the owner takes no
    weak references (bytes): a dead reference means the memory may be reused.  Device
    memory has no owner hpccoll can follow through every library (CuPy, PyTorch, Numba): its
    bindings live until evicted, which is safe because a binding only runs on buffers
    validated at its addresses."""
    if not isinstance(buf, np.ndarray):
        return _present
    obj = owner(buf)
    try:
        return weakref.ref(obj, released)
    except TypeError:
        return lambda: obj


@lru_cache(maxsize=None)
def mpi_datatype(dtype: np.dtype) -> MPI.Datatype:
    return MPI.Datatype.fromcode(np.dtype(dtype).char)


def message(buf: Any) -> MPI.buffer:
    """``buf``'s memory for MPI by its raw address (host or device), not keeping it alive."""
    return MPI.buffer.fromaddress(address(buf), buf.nbytes)


def mpi_buffer(buf: Any, mpi_type: MPI.Datatype) -> list:
    """An MPI message spec for ``buf`` that does not keep ``buf`` alive (raw address)."""
    return [message(buf), buf.size, mpi_type]


def check_op(op: Any, dtype: np.dtype) -> str:
    """The name of reduction ``op`` (an ``MPI.Op`` or a name); ValueError if hpccoll has no
    such op or MPI does not define it on ``dtype``'s elements."""
    name = op_name(op)
    if name is None:
        raise ValueError(f"unsupported reduction op {op_label(op)}; use one of "
                         f"{', '.join(f'MPI.{n.upper()}' for n in kernels.OPS)} (or "
                         f"{', '.join(repr(n) for n in kernels.OPS)})")
    if not kernels.applies(name, dtype):
        kind = kernels.KIND_NAMES.get(np.dtype(dtype).kind, np.dtype(dtype).kind)
        defined = ", ".join(kernels.KIND_NAMES[k] for k in kernels.OP_KINDS[name])
        raise ValueError(f"op {name} is not defined for {kind} dtype {dtype} (only on "
                         f"{defined} elements)")
    return name


def op_label(op: Any) -> str:
    """How to name ``op`` in a message: MPI's name for a predefined op."""
    if isinstance(op, MPI.Op):
        for name in ("SUM", "PROD", "MIN", "MAX", "LAND", "LOR", "LXOR", "BAND", "BOR", "BXOR",
                     "MAXLOC", "MINLOC", "REPLACE", "NO_OP"):
            if op == getattr(MPI, name, None):
                return f"MPI.{name}"
        return "(a user-defined MPI.Op)"
    return repr(op)


def op_name(op: Any) -> str | None:
    """The name of a reduction hpccoll runs ('sum', 'land', ...) for an MPI op or a name; None
    for anything else."""
    if isinstance(op, str):
        name = op.lower()
        return name if name in MPI_OPS else None
    if isinstance(op, MPI.Op):
        return _OP_HANDLES.get(op.handle)
    return None


@lru_cache(maxsize=None)
def native_op(name: str, dtype: np.dtype) -> MPI.Op:
    """The MPI op for the native collective: the predefined one (on booleans the logical twin
    of a bitwise op), or for float16 outside MPICH (MPI has no standard float16; MPICH
    reduces MPIX_C_FLOAT16) a user-defined commutative op computing with NumPy."""
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        name = BOOLEAN_TWINS.get(name, name)
    if dtype != np.float16 or MPI.get_vendor()[0] == "MPICH":
        return MPI_OPS[name]
    ufunc = kernels.UFUNCS[name]

    def combine(inbuf, inoutbuf, datatype):
        a = np.frombuffer(inbuf, np.float16)
        b = np.frombuffer(inoutbuf, np.float16)
        ufunc(a, b, out=b)
    return MPI.Op.Create(combine, commute=True)


def _present() -> bool:
    return True


def gpu_aware() -> bool:
    """Whether MPI takes device pointers: ``HPCCOLL_GPU_AWARE`` (0/1) if set, else the MPI
    library's ``MPIX_Query_cuda_support()`` where it has one (MPICH, Open MPI), else False.
    Read when a call is planned: each planned call keeps its decision.  The decision and
    what it rests on are logged once each (logger ``hpccoll``: a warning where the library
    cannot be asked, else at INFO), with how to override it."""
    setting = settings.read("HPCCOLL_GPU_AWARE")
    _log_decision(setting)
    return library_gpu_aware() if setting is None else setting


def library_gpu_aware() -> bool:
    """The MPI library's own answer: ``MPIX_Query_cuda_support()``, False where it has none."""
    return bool(_library_answer())


@lru_cache(maxsize=1)
def _library_answer() -> int | None:
    """``MPIX_Query_cuda_support()``; None where the MPI library has no such function."""
    try:
        query = ctypes.CDLL(MPI.__file__).MPIX_Query_cuda_support
    except (OSError, AttributeError):
        return None
    query.restype = ctypes.c_int
    return int(query())


@lru_cache(maxsize=None)
def _log_decision(setting: bool | None) -> None:
    if setting is not None:
        log.info("hpccoll: HPCCOLL_GPU_AWARE=%d: device buffers %s", setting,
                 DIRECT if setting else STAGED)
        return
    answer = _library_answer()
    if answer is None:
        log.warning("hpccoll: the MPI library has no MPIX_Query_cuda_support, so hpccoll "
                    "cannot ask whether it reads GPU memory: device buffers %s "
                    "(HPCCOLL_GPU_AWARE=1 if it does)", STAGED)
    elif answer:
        log.info("hpccoll: MPIX_Query_cuda_support() = %d: device buffers %s "
                 "(HPCCOLL_GPU_AWARE=0 stages them, e.g. where MPI is built with CUDA but its "
                 "transport, such as UCX, is not)", answer, DIRECT)
    else:
        log.info("hpccoll: MPIX_Query_cuda_support() = 0: device buffers %s "
                 "(HPCCOLL_GPU_AWARE=1 if MPI reads GPU memory all the same)", STAGED)
