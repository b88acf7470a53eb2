"""The MPI library's own collectives called from compiled code: the fast executor of
``algorithm="native"`` (and of ``auto`` where it resolves to native) for blocking calls.

One Numba-compiled function (:func:`_compiled`) posts the library's non-blocking collective
(``MPI_Iallreduce``, ``MPI_Iallgather``, ``MPI_Ialltoall``, ``MPI_Ireduce_scatter`` -- the
calls mpi4py's native path makes, so that the library runs the same algorithms)
through function pointers to the symbols of the library mpi4py loaded, with the handles
mpi4py holds (C ints in MPICH, pointers in Open MPI: :func:`available` says whether the
library is one it recognises), and polls ``MPI_Test`` a number of times -- as many idle polls
as the runtime's wait spins before it yields the core (:mod:`.progress`).  Completed, it
probes for a revocation notice as :meth:`~hpccoll.context.Context.check_notices` does.  Not
complete by then, it hands the request over: :meth:`NativeCall.finish` waits for it exactly as
every other wait of hpccoll does (:func:`~.progress.wait_requests`: the deadline counted from
the call's start, revocation notices, the memory left to :mod:`.abandoned` on failure), so
the failure model is the same on both executors; only a call that completes within those
polls never returns to Python before it is done.

A call's constants (counts, the functions' addresses, tags) and its scratch (the request,
flags, a status) live in one int64 array made once per validated call, its handles in an
array as wide as the library's handles; the compiled function also checks the buffers
against the validated call (size, C layout, writability, no overlap; the caller checks the
dtype, which selects the compiled code), so that a repeated call needs no other validation
in Python (:class:`NativeCall` reports a mismatch and the caller validates from scratch).
The functions are called through their addresses read at run time (:func:`_c_int`,
:func:`_c_double`), so the compiled code holds no address of this process and Numba caches
it on disk, per dtype and handle width, as the other kernels; a dtype's first call in a
fresh cache compiles for about a second.
"""

from __future__ import annotations

import ctypes
import time
from functools import lru_cache
from typing import Any

import numpy as np
from mpi4py import MPI

from .. import settings
from . import abandoned, progress

# the calls this executor runs: collective name -> code in the state array
KINDS = {"allreduce": 0, "allgather": 1, "alltoall": 2, "reduce_scatter": 3}
# the library functions called, in the order of their addresses in the state array
FUNCTIONS = ("MPI_Iallreduce", "MPI_Iallgather", "MPI_Ialltoall", "MPI_Ireduce_scatter",
             "MPI_Test", "MPI_Iprobe", "MPI_Wtime")
# the state array: constants, then scratch; the status gets room for any MPI_Status
(REQUEST, FLAG, STARTED, ERROR, KIND, COUNT, COUNTS, SEND_N, RECV_N, NOTICE_TAG, ANY_SOURCE,
 IN_PLACE, POLLS, FUNCTION) = range(14)
STATUS = FUNCTION + len(FUNCTIONS)
STATE_WORDS = STATUS + 16
DATATYPE, OP, COMM = range(3)       # the handles array
# what the compiled function returns
DONE, PENDING, NOTICE, MISMATCH, START_FAILED, TEST_FAILED = range(6)


def runs(collective: str, dtype: np.dtype) -> bool:
    """Whether this executor runs ``collective`` on ``dtype`` (Numba has no float16 arrays
    on the CPU) with this MPI library (:func:`available`)."""
    return collective in KINDS and np.dtype(dtype) != np.float16 and available()


@lru_cache(maxsize=1)
def available() -> bool:
    """Whether this executor can run: the MPI library mpi4py loaded is MPICH or Open MPI
    (whose handle and request types it knows) on a 64-bit platform, its symbols found."""
    return _addresses() is not None


@lru_cache(maxsize=1)
def _addresses() -> tuple[int, ...] | None:
    """The addresses of :data:`FUNCTIONS` in the library (None: not available)."""
    width = MPI._sizeof(MPI.Comm)
    if MPI.get_vendor()[0] not in ("MPICH", "Open MPI") or width not in (4, 8) or \
            {MPI._sizeof(t) for t in (MPI.Datatype, MPI.Op, MPI.Request)} != {width} or \
            MPI._sizeof(MPI.Status) > 8 * (STATE_WORDS - STATUS) or \
            ctypes.sizeof(ctypes.c_void_p) != 8:
        return None
    try:
        library = ctypes.CDLL(MPI.__file__)
        return tuple(ctypes.cast(getattr(library, name), ctypes.c_void_p).value
                     for name in FUNCTIONS)
    except (OSError, AttributeError):
        return None


def _handle(obj: Any) -> int:
    """``obj``'s MPI handle as a signed integer (mpi4py gives MPICH's negative ones as
    unsigned 64-bit values)."""
    width = 8 * MPI._sizeof(MPI.Comm)
    value = MPI._handleof(obj) & (1 << width) - 1
    return value - (1 << width) if value >> width - 1 else value


class NativeCall:
    """A validated blocking call of the library's own collective on the compiled executor:
    :meth:`run` on its buffers (None for ``send`` when in place) of the validated dtype."""

    def __init__(self, collective: str, label: str, comm: MPI.Comm, guard: Any,
                 count: int, p: int, send_n: int | None, recv_n: int,
                 datatype: MPI.Datatype, op: MPI.Op | None, notice_tag: int):
        self.label, self.guard = label, guard
        state = self.state = np.zeros(STATE_WORDS, np.int64)
        state[FUNCTION:FUNCTION + len(FUNCTIONS)] = _addresses()
        state[KIND], state[COUNT], state[RECV_N] = KINDS[collective], count, recv_n
        self.counts = np.full(p, count, np.intc)        # reduce_scatter's recvcounts
        state[COUNTS] = self.counts.ctypes.data
        state[SEND_N] = -1 if send_n is None else send_n
        state[IN_PLACE] = int(MPI.IN_PLACE) if send_n is None else 0
        self.handles = np.array([_handle(datatype), 0 if op is None else _handle(op),
                                 _handle(comm)], f"i{MPI._sizeof(MPI.Comm)}")
        state[NOTICE_TAG], state[ANY_SOURCE] = notice_tag, MPI.ANY_SOURCE
        state[POLLS] = progress.idle_polls()
        self.start = _compiled()

    def run(self, send: np.ndarray | None, recv: np.ndarray) -> bool:
        """Run the call on these buffers (of the validated dtype); False (nothing sent) if
        they are not of the validated size, layout and writability, or overlap.  Raises as
        the other executor does: an MPI error of the start, or (the communicator revoked) an
        MPI error, CollectiveTimeout or another rank's CommunicatorRevoked while waiting.
        (``self.start(send or recv, recv, self.state, self.handles)`` followed by
        :meth:`finish` unless it returned :data:`DONE` is the same, one call less.)"""
        return self.finish(self.start(recv if send is None else send, recv, self.state,
                                      self.handles), send, recv)

    def finish(self, code: int, send: np.ndarray | None, recv: np.ndarray) -> bool:
        """:meth:`run` after the compiled function returned ``code``."""
        if code == DONE:
            return True
        if code == MISMATCH:
            return False
        state = self.state
        if code == START_FAILED:
            raise MPI.Exception(int(state[ERROR]))
        if code == NOTICE:
            raise self.guard.notice()
        memory = (send, recv)
        request = MPI.Request.fromhandle(self._request())
        if code == TEST_FAILED:
            abandoned.hold(self.label, [request], *memory)
            raise self.guard.fail(MPI.Exception(int(state[ERROR])))
        limit = settings.current.timeout
        deadline = None if limit is None else \
            time.monotonic() - (MPI.Wtime() - state[STARTED] / 1e9) + limit
        progress.wait_requests([request], self.label, deadline, memory, self.guard)
        self.guard.check_notices()
        return True

    def _request(self) -> int:
        """The handle of the request the compiled function left in flight, as mpi4py
        takes it."""
        width = MPI._sizeof(MPI.Request)
        value = int(self.state[REQUEST:REQUEST + 1].view(f"<i{width}")[0])
        return value & (1 << 64) - 1


def executor(collective: str, dtype: np.dtype) -> str:
    """Which executor runs a blocking call of ``collective`` on ``dtype`` with the native
    algorithm on host memory (what ``hpccoll explain`` says)."""
    if collective not in KINDS:
        return f"mpi4py's non-blocking {collective} (the compiled executor does not post it)"
    if dtype == np.float16:
        return "mpi4py's non-blocking collective (the compiled executor takes no float16)"
    if not available():
        return ("mpi4py's non-blocking collective (the compiled executor does not know this "
                f"MPI library: {MPI.get_vendor()[0]})")
    return (f"compiled: {FUNCTIONS[KINDS[collective]]} of {MPI.get_vendor()[0]} called from "
            "Numba code (blocking calls on NumPy arrays with equal blocks and a predefined "
            "op; other calls through mpi4py)")


def _c_int(address: int, arguments: tuple) -> int:
    """In compiled code: the C function at ``address`` returning int, called with the
    ``arguments`` (typed as the C parameters: int32 for int, int64 for addresses)."""
    raise NotImplementedError("compiled code only")


def _c_double(address: int) -> float:
    """In compiled code: the C function at ``address`` taking nothing, returning double."""
    raise NotImplementedError("compiled code only")


def _plain(array: Any, write: bool) -> bool:
    """In compiled code: whether ``array`` is C-contiguous and (``write``) writable, as
    validation requires."""
    raise NotImplementedError("compiled code only")


@lru_cache(maxsize=1)
def _compiled() -> Any:
    """``start(send, recv, state, handles)`` compiled (Numba imported on first use): post the
    call, poll it, return :data:`DONE`, :data:`PENDING`, ... (see the module doc)."""
    from llvmlite import ir
    from numba import njit, types
    from numba.core.errors import TypingError
    from numba.extending import intrinsic, overload

    @intrinsic
    def c_int(typingctx, address, arguments):
        def codegen(context, builder, signature, args):
            kinds = [context.get_value_type(t) for t in signature.args[1]]
            function = builder.inttoptr(args[0], ir.FunctionType(ir.IntType(32), kinds)
                                        .as_pointer())
            return builder.call(function, [builder.extract_value(args[1], i)
                                           for i in range(len(kinds))])
        return types.int32(address, arguments), codegen

    @intrinsic
    def c_double(typingctx, address):
        def codegen(context, builder, signature, args):
            function = builder.inttoptr(args[0], ir.FunctionType(ir.DoubleType(), [])
                                        .as_pointer())
            return builder.call(function, [])
        return types.float64(address), codegen

    @overload(_c_int)
    def _typed_c_int(address, arguments):
        return lambda address, arguments: c_int(address, arguments)

    @overload(_c_double)
    def _typed_c_double(address):
        return lambda address: c_double(address)

    @overload(_plain, prefer_literal=True)
    def _typed_plain(array, write):
        if not isinstance(array, types.Array) or not isinstance(write, types.BooleanLiteral):
            raise TypingError("_plain takes an array and a constant")
        plain = array.layout == "C" and (array.mutable or not write.literal_value)
        return lambda array, write: plain

    @njit(cache=True)
    def start(send, recv, state, handles):
        recv_n, itemsize = recv.size, recv.itemsize
        if not _plain(recv, True) or recv_n != state[RECV_N]:
            return MISMATCH
        send_at, recv_at = np.int64(send.ctypes.data), np.int64(recv.ctypes.data)
        if state[IN_PLACE] != 0:
            send_at = state[IN_PLACE]
        elif not _plain(send, False) or send.size != state[SEND_N] or \
                send.size and recv_n and send_at < recv_at + recv_n * itemsize and \
                recv_at < send_at + send.size * itemsize:
            return MISMATCH
        base = np.int64(state.ctypes.data)
        request, flag, status = base + 8 * REQUEST, base + 8 * FLAG, base + 8 * STATUS
        function = state[FUNCTION:]
        state[STARTED] = np.int64(_c_double(function[6]) * 1e9)
        kind, count = state[KIND], np.int32(state[COUNT])
        datatype, op, comm = handles[DATATYPE], handles[OP], handles[COMM]
        if kind == 0:
            error = _c_int(function[kind], (send_at, recv_at, count, datatype, op, comm,
                                            request))
        elif kind == 3:
            error = _c_int(function[kind], (send_at, recv_at, state[COUNTS], datatype, op,
                                            comm, request))
        else:
            error = _c_int(function[kind], (send_at, count, datatype, recv_at, count,
                                            datatype, comm, request))
        if error:
            state[ERROR] = error
            return START_FAILED
        source, tag = np.int32(state[ANY_SOURCE]), np.int32(state[NOTICE_TAG])
        for _ in range(state[POLLS]):
            state[FLAG] = 0
            error = _c_int(function[4], (request, flag, status))
            if error:
                state[ERROR] = error
                return TEST_FAILED
            if state[FLAG]:
                state[FLAG] = 0
                _c_int(function[5], (source, tag, comm, flag, status))
                return NOTICE if state[FLAG] else DONE
        return PENDING

    return start
