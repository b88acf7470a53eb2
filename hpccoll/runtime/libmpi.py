"""The MPI library's C functions, called from Numba-compiled code: what the compiled executors
(:mod:`.native`, :mod:`.scheduled`) share.

:func:`addresses` finds :data:`FUNCTIONS` in the library mpi4py loaded, if it is MPICH or
Open MPI on a 64-bit platform (their handle, request and status types are known: C ints in
MPICH, pointers in Open MPI); :func:`handle` gives an mpi4py object's handle as the compiled
code passes it.  In compiled code, after :func:`register` (Numba imported on first use):
:func:`c_int` calls a function returning ``int`` at an address read at run time (so the
compiled code holds no address of this process and Numba caches it on disk),
:func:`c_double` one taking nothing and returning ``double``, :func:`plain` says whether an
array is C-contiguous (and writable), :func:`carray_at` is an array over memory at an
address.
"""

from __future__ import annotations

import ctypes
from functools import lru_cache
from typing import Any

from mpi4py import MPI

# the functions called, by their index in :func:`addresses`, and what the compiled executors'
# functions return (the compiled executors' disk caches key on their own source files only:
# after changing these in a checkout, delete the runtime's __pycache__/*.nbi so that they
# compile anew; an install writes every file anew)
FUNCTIONS = ("MPI_Iallreduce", "MPI_Iallgather", "MPI_Iallgatherv", "MPI_Ialltoall",
             "MPI_Ialltoallv", "MPI_Ireduce_scatter", "MPI_Ibcast", "MPI_Ireduce", "MPI_Wtime",
             "MPI_Isend", "MPI_Irecv", "MPI_Testsome", "MPI_Start")
(IALLREDUCE, IALLGATHER, IALLGATHERV, IALLTOALL, IALLTOALLV, IREDUCE_SCATTER, IBCAST, IREDUCE,
 WTIME, ISEND, IRECV, TESTSOME, START) = range(len(FUNCTIONS))
STATUS_WORDS = 16               # int64 words that hold any MPI_Status of the two libraries
# the run is done (and no revocation notice came); still in flight after the polls it was
# given; done, a notice waiting; not run (the arrays are not the validated ones); the library
# refused to start it (nothing of it in flight here); an MPI call failed, transfers in flight
DONE, PENDING, NOTICE, MISMATCH, START_FAILED, FAILED = range(6)


def available() -> bool:
    """Whether the compiled executors can run with the MPI library mpi4py loaded."""
    return addresses() is not None


@lru_cache(maxsize=1)
def addresses() -> tuple[int, ...] | None:
    """The addresses of :data:`FUNCTIONS` in the library (None: not MPICH or Open MPI on a
    64-bit platform, or a symbol missing)."""
    width = MPI._sizeof(MPI.Comm)
    if MPI.get_vendor()[0] not in ("MPICH", "Open MPI") or width not in (4, 8) or \
            {MPI._sizeof(t) for t in (MPI.Datatype, MPI.Op, MPI.Request)} != {width} or \
            MPI._sizeof(MPI.Status) > 8 * STATUS_WORDS or \
            ctypes.sizeof(ctypes.c_void_p) != 8:
        return None
    try:
        library = ctypes.CDLL(MPI.__file__)
        return tuple(ctypes.cast(getattr(library, name), ctypes.c_void_p).value
                     for name in FUNCTIONS)
    except (OSError, AttributeError):
        return None


def handle_dtype() -> str:
    """The NumPy dtype of the library's handles (int32 in MPICH, int64 in Open MPI)."""
    return f"i{MPI._sizeof(MPI.Comm)}"


def handle(obj: Any) -> int:
    """``obj``'s MPI handle as a signed integer (mpi4py gives MPICH's negative ones as
    unsigned 64-bit values)."""
    width = 8 * MPI._sizeof(MPI.Comm)
    value = MPI._handleof(obj) & (1 << width) - 1
    return value - (1 << width) if value >> width - 1 else value


def c_int(address: int, arguments: tuple) -> int:
    """In compiled code: the C function at ``address`` returning int, called with the
    ``arguments`` (typed as the C parameters: int32 for int, int64 for addresses)."""
    raise NotImplementedError("compiled code only")


def c_double(address: int) -> float:
    """In compiled code: the C function at ``address`` taking nothing, returning double."""
    raise NotImplementedError("compiled code only")


def plain(array: Any, write: bool) -> bool:
    """In compiled code: whether ``array`` is C-contiguous and (``write``) writable, as
    validation requires."""
    raise NotImplementedError("compiled code only")


def carray_at(address: int, count: int, like: Any) -> Any:
    """In compiled code: the 1-D array of ``count`` elements of ``like``'s dtype at
    ``address``."""
    raise NotImplementedError("compiled code only")


@lru_cache(maxsize=1)
def register() -> None:
    """Make :func:`c_int`, :func:`c_double`, :func:`plain` and :func:`carray_at` known to
    Numba (imports it)."""
    from llvmlite import ir
    from numba import carray, types
    from numba.core.errors import TypingError
    from numba.extending import intrinsic, overload

    @intrinsic
    def call_int(typingctx, address, arguments):
        def codegen(context, builder, signature, args):
            kinds = [context.get_value_type(t) for t in signature.args[1]]
            function = builder.inttoptr(args[0], ir.FunctionType(ir.IntType(32), kinds)
                                        .as_pointer())
            return builder.call(function, [builder.extract_value(args[1], i)
                                           for i in range(len(kinds))])
        return types.int32(address, arguments), codegen

    @intrinsic
    def call_double(typingctx, address):
        def codegen(context, builder, signature, args):
            function = builder.inttoptr(args[0], ir.FunctionType(ir.DoubleType(), [])
                                        .as_pointer())
            return builder.call(function, [])
        return types.float64(address), codegen

    @intrinsic
    def pointer(typingctx, address, like):
        target = types.CPointer(like.dtype)

        def codegen(context, builder, signature, args):
            return builder.inttoptr(args[0], context.get_value_type(target))
        return target(address, like), codegen

    @overload(c_int)
    def _typed_c_int(address, arguments):
        return lambda address, arguments: call_int(address, arguments)

    @overload(c_double)
    def _typed_c_double(address):
        return lambda address: call_double(address)

    @overload(plain, prefer_literal=True)
    def _typed_plain(array, write):
        if not isinstance(array, types.Array) or not isinstance(write, types.BooleanLiteral):
            raise TypingError("plain takes an array and a constant")
        is_plain = array.layout == "C" and (array.mutable or not write.literal_value)
        return lambda array, write: is_plain

    @overload(carray_at)
    def _typed_carray_at(address, count, like):
        return lambda address, count, like: carray(pointer(address, like), count)
