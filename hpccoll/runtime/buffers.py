"""User buffers: NumPy or CuPy arrays, their MPI datatypes, and GPU-aware MPI detection.

Everything the executor needs to know about an array goes through here: whether it lives on
the host or a GPU, its flat view, its address, who owns its memory (for the persistent-request
cache), and how to compute on it.  CuPy buffers go to MPI directly when the MPI library is
CUDA-aware, otherwise through host copies (see :func:`gpu_aware`).
"""

from __future__ import annotations

import ctypes
import os
import weakref
from functools import lru_cache
from typing import Any, Callable

import numpy as np
from mpi4py import MPI

from ..collectives import SUPPORTED_DTYPES
from . import kernels


# the MPI op of each reduction hpccoll runs (SUM for "sum", ...)
def _mpi_ops() -> dict[str, MPI.Op]:
    return {name: getattr(MPI, name.upper()) for name in kernels.OPS}


MPI_OPS = _mpi_ops()
_OP_HANDLES = {op.handle: name for name, op in MPI_OPS.items()}
# MPI defines LAND, LOR and LXOR for C_BOOL but no bitwise op: on booleans they are the same
BOOLEAN_TWINS = {"band": "land", "bor": "lor", "bxor": "lxor"}


def is_cupy(buf: Any) -> bool:
    return type(buf).__module__.startswith("cupy")


def kind(buf: Any) -> str | None:
    """'numpy', 'cupy', or None for anything that is not an array hpccoll takes."""
    if isinstance(buf, np.ndarray):
        return "numpy"
    if is_cupy(buf) and hasattr(buf, "__cuda_array_interface__"):
        return "cupy"
    return None


def check_array(buf: Any, name: str, *, writable: bool) -> None:
    """TypeError/ValueError if ``buf`` cannot be used as a collective's buffer."""
    if kind(buf) is None:
        raise TypeError(f"{name} must be a NumPy or CuPy array, got {type(buf).__name__}")
    if buf.dtype not in SUPPORTED_DTYPES:
        supported = ", ".join(str(d) for d in SUPPORTED_DTYPES)
        raise TypeError(f"{name} has dtype {buf.dtype}, which is not supported ({supported})")
    if not buf.flags.c_contiguous:
        raise ValueError(f"{name} must be C-contiguous (pass np.ascontiguousarray(...))")
    if writable and not buf.flags.writeable:
        raise ValueError(f"{name} is read-only")


def flat(buf: Any) -> Any:
    """The 1-D view of a C-contiguous array."""
    return buf.reshape(-1)


def borrowed(buf: Any) -> Any:
    """The 1-D view of ``buf``'s memory that does not keep ``buf`` alive (for cached
    bindings: whoever uses it must hold ``buf`` meanwhile, and check :func:`owner_ref`)."""
    view = flat(buf)
    if view.nbytes == 0:
        return view[:0].copy()
    if isinstance(buf, np.ndarray):
        memory = (ctypes.c_char * view.nbytes).from_address(view.ctypes.data)
        return np.frombuffer(memory, view.dtype)
    import cupy
    memory = cupy.cuda.UnownedMemory(view.data.ptr, view.nbytes, None)
    return cupy.ndarray(view.shape, view.dtype, cupy.cuda.MemoryPointer(memory, 0))


def address(buf: Any) -> int:
    if isinstance(buf, np.ndarray):
        return MPI.buffer(buf).address
    return buf.data.ptr


def owner(buf: Any) -> Any:
    """The object that owns ``buf``'s memory (the end of its ``.base`` chain, through the
    exporter of a memoryview: a NumPy view of a bytearray or array.array is owned by it)."""
    if is_cupy(buf):
        return buf.data.mem
    obj = buf
    while True:
        if isinstance(obj, memoryview):
            obj = obj.obj
        elif getattr(obj, "base", None) is not None:
            obj = obj.base
        else:
            return obj


def owner_ref(buf: Any) -> Callable[[], Any]:
    """A weak reference to the owner of ``buf``'s memory, or a strong one where the owner
    takes no weak references (bytes): a dead reference means the memory may be reused."""
    obj = owner(buf)
    try:
        return weakref.ref(obj)
    except TypeError:
        return lambda: obj


@lru_cache(maxsize=None)
def mpi_datatype(dtype: np.dtype) -> MPI.Datatype:
    return MPI.Datatype.fromcode(np.dtype(dtype).char)


def mpi_buffer(buf: Any, mpi_type: MPI.Datatype) -> list:
    """An MPI message spec for ``buf`` that does not keep ``buf`` alive (raw address)."""
    return [MPI.buffer.fromaddress(address(buf), buf.nbytes), buf.size, mpi_type]


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
        defined = ", ".join(kernels.KIND_NAMES[k] for k in kernels.KINDS[name])
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


@lru_cache(maxsize=1)
def gpu_aware() -> bool:
    """Whether MPI takes device pointers: ``HPCCOLL_GPU_AWARE`` (0/1) if set, else the MPI
    library's ``MPIX_Query_cuda_support()`` where it has one (MPICH, Open MPI)."""
    setting = os.environ.get("HPCCOLL_GPU_AWARE")
    if setting is not None:
        return setting.strip().lower() in ("1", "true", "yes")
    try:
        query = ctypes.CDLL(MPI.__file__).MPIX_Query_cuda_support
    except (OSError, AttributeError):
        return False
    query.restype = ctypes.c_int
    return bool(query())


def device_reduction(op: str) -> kernels.Reduction:
    """The reduction for CuPy arrays: the CuPy ufunc of ``op``, pairwise."""
    import cupy
    ufunc = getattr(cupy, kernels.UFUNCS[op].__name__)
    return kernels.Reduction(lambda dst, a, b: ufunc(a, b, out=dst))


def to_host(buf: Any) -> np.ndarray:
    return buf.get() if is_cupy(buf) else buf


def synchronize(buf: Any) -> None:
    """Wait for pending GPU work on ``buf``'s device before MPI touches it."""
    if is_cupy(buf):
        import cupy
        cupy.cuda.get_current_stream().synchronize()
