"""The MPI library's own collectives called from compiled code: the fast executor of
``algorithm="native"`` (and of ``auto`` where it resolves to native) for blocking,
non-blocking and persistent calls.

One Numba-compiled function (:func:`_compiled`) posts the library's non-blocking collective
(``MPI_Iallreduce``, ``MPI_Iallgather(v)``, ``MPI_Ialltoall(v)``, ``MPI_Ireduce_scatter``,
``MPI_Ibcast``, ``MPI_Ireduce`` -- the calls mpi4py's native path makes, so that the library
runs the same algorithms), or starts a persistent one (``MPI_Start``: a persistent request's
``MPI_<Collective>_init``, :meth:`NativeCall.persistent`),
through function pointers to the symbols of the library mpi4py loaded, with the handles
mpi4py holds (C ints in MPICH, pointers in Open MPI: :func:`available` says whether the
library is one it recognises), and polls it a number of times -- as many idle polls as the
runtime's wait spins before it yields the core (:mod:`.progress`) -- with ``MPI_Testsome`` on
its request and the context's receive of revocation notices together, so that it finds a
notice as :meth:`~hpccoll.context.Context.check_notices` would, in the same call.  Not
complete by then, :class:`NativeCall` is the call in flight: its ``wait()`` waits exactly as
every other wait of hpccoll does (:func:`~.progress.wait_requests`: the deadline counted from
the call's start, revocation notices, the memory left to :mod:`.abandoned` on failure), so
the failure model is the same on both executors; only a call that completes within those
polls never returns to Python before it is done.

A call's constants (counts, the functions' addresses, tags) and its scratch (the request,
flags, a status) live in one int64 array made once per validated call, its handles in an
array as wide as the library's handles.  The call's :class:`~.entry.Bound` (C) checks the
buffers against the validated call (dtype, size, C layout, writability, no overlap) and
calls the compiled functions by address (:func:`functions`), so that a repeated call needs
no other validation in Python and no Numba dispatch (:class:`NativeCall` reports a mismatch
and the caller validates from scratch); where that C code was not built, the Numba
functions check the buffers themselves (:func:`_start`, compiled per dtype and layout).
The MPI functions are called through their addresses read at run time (:mod:`.libmpi`), so
the compiled code holds no address of this process and Numba caches it on disk, as the
other kernels: the posting and polling once per handle width (about a second in a fresh
cache).
"""

from __future__ import annotations

import copy
import time
from functools import lru_cache
from typing import Any

import numpy as np
from mpi4py import MPI

from .. import settings
from ..collectives import nonblocking, spec
from ..schedule import Call, offsets
from . import abandoned, buffers, entry, libmpi, progress
from .kernels import compiling, computes
from .libmpi import (DONE, FAILED, MISMATCH, NOTICE, PENDING, START_FAILED, c_double, c_int,
                     carray_at, plain)
from .progress import COMPLETED

# the library's non-blocking collectives the compiled function posts (one branch each): C
# function -> its index in libmpi.FUNCTIONS, the call's code in the state array
POSTED = {libmpi.FUNCTIONS[i]: i for i in (
    libmpi.IALLREDUCE, libmpi.IALLGATHER, libmpi.IALLGATHERV, libmpi.IALLTOALL,
    libmpi.IALLTOALLV, libmpi.IREDUCE_SCATTER, libmpi.IBCAST, libmpi.IREDUCE)}
LARGEST_COUNT = 2**31 - 1       # counts pass as C ints (larger calls go through mpi4py)
# the state array: constants, then scratch (MPI_Testsome's outcount, its two indices, room
# for two of any MPI_Status); NOTICED: the address of the guard's ``noticed`` flag
(OUTCOUNT, INDICES, STARTED, ERROR, KIND, COUNT, VECTORS, ROW, SEND_N, RECV_N, NOTICED,
 UNDEFINED, IN_PLACE, ROOT, FUNCTION) = range(15)
# the rows of the vectors array (C ints, one per rank): what the vector forms take
SEND_COUNTS, SEND_DISPLS, RECV_COUNTS, RECV_DISPLS = range(4)
STATUS = FUNCTION + len(libmpi.FUNCTIONS)
STATE_WORDS = STATUS + 2 * libmpi.STATUS_WORDS
# the handles array: the call's, then its request and the guard's receive of revocation
# notices side by side (one MPI_Testsome polls both)
DATATYPE, OP, COMM, CALL, LISTENING = range(5)


def posted(method: str) -> int | None:
    """The code of the C function of the non-blocking form of mpi4py's ``method`` (the one
    a collective's spec names: Allreduce -> MPI_Iallreduce) if this executor posts it."""
    return POSTED.get("MPI_" + nonblocking(method))


def refusal(collective: str, dtype: np.dtype, largest: int = 0,
            op: MPI.Op | None = None) -> str | None:
    """Why this executor does not run ``collective`` on ``dtype`` with counts and
    displacements up to ``largest`` elements and ``op`` (None: it does).  What it runs: a
    collective it posts, a dtype compiled code computes with (:func:`.kernels.computes`),
    counts that pass as C ints, an op the library predefines, an MPI library
    :mod:`.libmpi` knows."""
    if posted(spec(collective).mpi_name) is None:
        return f"the compiled executor does not post {collective}"
    if not computes(dtype):
        return f"the compiled executor takes no {dtype}"
    if largest > LARGEST_COUNT:
        return "counts beyond 2^31-1 (the compiled executor passes C ints)"
    if op is not None and not op.is_predefined:
        return "a user-defined op"
    if not libmpi.available():
        return f"the compiled executor does not know this MPI library: {MPI.get_vendor()[0]}"
    return None


def runs(collective: str, dtype: np.dtype, largest: int = 0, op: MPI.Op | None = None
         ) -> bool:
    """Whether this executor runs the call (:func:`refusal` has no reason against it)."""
    return refusal(collective, dtype, largest, op) is None


def vectors(call: Call) -> np.ndarray:
    """The counts and displacements of ``call`` as the vector forms take them (rows
    :data:`SEND_COUNTS` ... :data:`RECV_DISPLS`; reduce_scatter's recvcounts and allgather's
    blocks are the receive rows), in elements."""
    if call.recvcounts:             # (all-to-all's: counts and displacements both ways)
        rows = (call.counts, call.sdispls, call.recvcounts, call.rdispls)
    else:
        rows = ((), (), call.counts, offsets(call.counts) if call.counts else ())
    return np.array([list(row) or [0] * len(call.counts) for row in rows],
                    np.int64).reshape(4, -1)


class NativeCall:
    """A validated call of the library's own collective on the compiled executor, run by
    :meth:`start` (the compiled executors' one entry, as :meth:`.scheduled.Runner.start`):
    done at once, or in flight -- this object then completes it (``test()``, ``wait()``), one
    run at a time (``busy``; :meth:`twin` gives another for a call that may overlap).  The
    call is the library's non-blocking collective, or its persistent one started by
    ``MPI_Start`` (:meth:`persistent`)."""

    def __init__(self, call: Call, label: str, comm: MPI.Comm, guard: Any,
                 send_n: int | None, recv_n: int | None, dtype: np.dtype, op: MPI.Op | None):
        """``send_n`` None: in place (or no send buffer: bcast); ``recv_n`` None: the
        receive buffer is not used (a reduce's non-root ranks); ``guard``'s receive of
        revocation notices is polled with the call's request."""
        kind = posted(spec(call.collective).native_method(call))
        state = _state(kind, guard)
        state[ROOT] = call.root
        state[COUNT] = call.counts[call.rank if kind == libmpi.IALLGATHERV else 0]
        state[RECV_N] = -1 if recv_n is None else recv_n
        self.vectors = vectors(call).astype(np.intc)
        state[VECTORS], state[ROW] = self.vectors.ctypes.data, self.vectors[0].nbytes
        state[SEND_N] = -1 if send_n is None else send_n
        state[IN_PLACE] = int(MPI.IN_PLACE) if send_n is None else 0
        self._ready(label, guard, state, (buffers.mpi_datatype(dtype), op, comm), dtype)

    @classmethod
    def persistent(cls, request: MPI.Prequest, label: str, guard: Any) -> "NativeCall":
        """The library's persistent collective ``request`` as a call of this executor: a run
        starts it (``MPI_Start``, on the buffers it was made on: the caller's are not read)
        and polls it as every call's; a run that fails leaves it to :mod:`.abandoned`
        (``left``), which frees it once complete."""
        self = cls.__new__(cls)
        state = _state(libmpi.START, guard)
        state[SEND_N] = state[RECV_N] = -1
        self._ready(label, guard, state, (None, None, None), None)
        self.handles[CALL] = libmpi.handle(request)
        self.prequest = request
        return self

    def _ready(self, label: str, guard: Any, state: np.ndarray, handles: tuple,
               dtype: np.dtype | None) -> None:
        """Set up a call on ``state`` with ``handles`` (its datatype, op and communicator;
        None: not used) for buffers of ``dtype``."""
        self.label, self.guard, self.state = label, guard, state
        self.handles = np.array([0 if x is None else libmpi.handle(x)
                                 for x in (*handles, MPI.REQUEST_NULL, guard.listening)],
                                libmpi.handle_dtype())
        self.polls = progress.idle_polls()
        self.dtype = dtype
        self.bound = self._bind()
        self.busy = self.left = False
        self.prequest: MPI.Prequest | None = None
        self.memory: tuple = ()         # the arrays of the run in flight

    def twin(self) -> "NativeCall":
        """The same call with a state of its own (for a non-blocking start while this one
        may be in flight)."""
        twin = copy.copy(self)
        twin.state, twin.handles = self.state.copy(), self.handles.copy()
        twin.bound = twin._bind()
        return twin

    def _bind(self) -> Any:
        """This call's compiled functions bound to its state (:func:`.entry.bind`): run
        posts (:func:`_post`), resume polls (:func:`_test`); the send buffer is taken from
        the caller unless in place (or none), the receive buffer unless not used."""
        state, handles = self.state, self.handles
        send = (-1, int(state[IN_PLACE])) if state[IN_PLACE] else (int(state[SEND_N]), 0)
        recv = (-1, 0) if state[RECV_N] < 0 else (int(state[RECV_N]), 0)

        def dispatched() -> entry.Dispatched:
            launch, poll = _compiled()
            if state[KIND] == libmpi.START:     # (the persistent request's own buffers)
                def run(s: Any, r: Any, polls: int, tag: int) -> int:
                    return _post(0, 0, state, handles, polls)
            else:
                def run(s: Any, r: Any, polls: int, tag: int) -> int:
                    return launch(r if s is None else s, s if r is None else r, state,
                                  handles, polls)
            return entry.Dispatched(run, lambda polls, tag: poll(state, handles, polls))
        return entry.bind(functions, state, handles, self.dtype, send, recv, dispatched)

    def start(self, send: np.ndarray | None, recv: np.ndarray | None, tag: int, polls: int
              ) -> Any:
        """Post the call on ``send`` (None: in place, or none) and ``recv`` (None where the
        rank's receive buffer is not used) and poll it ``polls`` times (0: post only):
        :data:`~.progress.COMPLETED` if done, this call in flight (``test()``/``wait()``
        complete it under the deadline), or None (nothing sent) if it is in flight already or
        the arrays are not as validated (size, C layout, writability, no overlap; the caller
        checks the dtype, which selects the compiled code).  Raises as the other executor
        does, the communicator revoked: an MPI error (as a CollectiveError) of the start,
        or another rank's CommunicatorRevoked.  (``tag``: the library tags its own
        messages.)"""
        if self.busy:
            return None
        code = self.bound(send, recv, polls, tag)
        if code == DONE:
            return COMPLETED
        if code == MISMATCH:
            return None
        return self.resume(code, send, recv, tag)

    def resume(self, code: int, send: Any, recv: Any, tag: int) -> "NativeCall":
        """This call, which the compiled function left with ``code`` (neither done nor a
        mismatch) on ``send`` and ``recv``, in flight (raises if the start failed or a notice
        came)."""
        self.memory, self.busy = (send, recv), True
        if code != PENDING:
            self._finish(code)
        return self

    def test(self) -> bool:
        if not self.busy:
            return True
        code = self.bound.resume(1, 0)
        if code == PENDING and not self.overdue():
            return False
        self._finish(code)
        return True

    def wait(self) -> None:
        if self.busy:
            self._finish(self.bound.resume(self.polls, 0))

    @property
    def done(self) -> bool:
        """Whether no run is in flight, nor left in flight by a failure."""
        return not self.busy and not self.left

    def overdue(self) -> bool:
        """Whether the call in flight is past its deadline (counted from its start)."""
        deadline = self._deadline()
        return deadline is not None and time.monotonic() > deadline

    def _finish(self, code: int) -> None:
        """Complete the run in flight from where the compiled code left it (``code``): done,
        or waited for as every wait of hpccoll (the deadline counted from the call's start,
        revocation notices, the memory left to :mod:`.abandoned` on failure), or raise."""
        memory, self.memory = self.memory, ()
        try:
            if code == DONE:
                return
            state = self.state
            if code == START_FAILED:     # nothing posted here; peers may be waiting for it
                raise self.guard.fail(MPI.Exception(int(state[ERROR])))
            if code == NOTICE:
                raise self.guard.notice()
            request = self.prequest if self.prequest is not None else \
                MPI.Request.fromhandle(self._request())
            if code == FAILED:
                self.left = True
                abandoned.hold(self.label, [request], *memory)
                raise self.guard.fail(MPI.Exception(int(state[ERROR])))
            try:
                progress.wait_requests([request], self.label, self._deadline(), memory,
                                       self.guard)
            except BaseException:       # (left to abandoned)
                self.left = True
                raise
            self.guard.check_notices()
        finally:
            self.busy = False

    def _deadline(self) -> float | None:
        """The call in flight's deadline on ``time.monotonic``'s clock."""
        limit = settings.current.timeout
        return None if limit is None else \
            time.monotonic() - (MPI.Wtime() - self.state[STARTED] / 1e9) + limit

    def _request(self) -> int:
        """The handle of the request the compiled function left in flight, as mpi4py
        takes it."""
        return int(self.handles[CALL]) & (1 << 8 * self.handles.itemsize) - 1


def _state(kind: int, guard: Any) -> np.ndarray:
    """A new state array of a call of ``kind`` (the index of the C function it runs) that
    notes on ``guard``'s ``noticed`` flag a revocation notice its polls find."""
    state = np.zeros(STATE_WORDS, np.int64)
    state[FUNCTION:STATUS] = libmpi.addresses()
    state[KIND], state[NOTICED], state[UNDEFINED] = kind, guard.noticed.ctypes.data, \
        MPI.UNDEFINED
    return state


def executor(collective: str, dtype: np.dtype) -> str:
    """Which executor runs a blocking call of ``collective`` on ``dtype`` with the native
    algorithm on host memory and a predefined op (what ``hpccoll explain`` says, from
    :func:`refusal`)."""
    reason = refusal(collective, dtype)
    if reason is not None:
        return f"mpi4py's non-blocking {spec(collective).mpi_name} ({reason})"
    return (f"compiled: {libmpi.FUNCTIONS[posted(spec(collective).mpi_name)]} of "
            f"{MPI.get_vendor()[0]} called from Numba code (NumPy arrays; a user-defined op, "
            "or counts beyond 2^31-1, through mpi4py; persistent requests on host memory: "
            f"the library's persistent {spec(collective).mpi_name}_init, started by "
            "MPI_Start from the same compiled code)")


@lru_cache(maxsize=1)
@compiling()
def functions() -> tuple[int, int]:
    """The addresses of ``int64 run(send_at, recv_at, state_at, state_n, handles_at,
    handles_n, polls, tag)`` -- :func:`_post` on the arrays at those addresses (the buffers
    checked by the caller, the :class:`~.entry.Bound`; the tag unused: the library tags its
    own messages) -- and of ``resume`` of the same signature, :func:`_test` (the buffers and
    tag unused).  Compiled once per handle width, cached on disk."""
    from numba import cfunc, types
    _compiled()
    like_state, like_handles = np.empty(0, np.int64), np.empty(0, libmpi.handle_dtype())
    signature = types.int64(*[types.int64] * 8)

    @cfunc(signature, cache=True)
    def run(send_at, recv_at, state_at, state_n, handles_at, handles_n, polls, tag):
        return _post(send_at, recv_at, carray_at(state_at, state_n, like_state),
                     carray_at(handles_at, handles_n, like_handles), polls)

    @cfunc(signature, cache=True)
    def resume(send_at, recv_at, state_at, state_n, handles_at, handles_n, polls, tag):
        return _test(carray_at(state_at, state_n, like_state),
                     carray_at(handles_at, handles_n, like_handles), polls)
    return run.address, resume.address


@lru_cache(maxsize=1)
def _compiled() -> Any:
    """``start(send, recv, state, handles, polls)`` and ``test(state, handles, polls)``
    compiled (Numba imported on first use): post the call and poll it ``polls`` times, or
    poll the posted call; return :data:`DONE`, :data:`PENDING`, ... (see the module doc).
    ``_start`` checks the arrays (Numba specialises it for their dtypes and layouts: a few
    lines each) and calls ``_post``, compiled once for every dtype, which posts the call and
    calls ``_test``.  All are module functions, ``_post`` and ``_test`` compiled in place so
    that the others call them as globals: Numba keys a closure's disk cache on its cells'
    pickles, and a cell holding a compiled function pickles differently in every process, so
    a ``start`` closing over ``test`` missed the cache and compiled anew in every process
    (2.5 s a dtype)."""
    global _test, _post
    from numba import njit
    libmpi.register()
    _test = njit(cache=True)(_test)
    _post = njit(cache=True)(_post)
    return njit(cache=True)(_start), _test


def _test(state, handles, polls):
    base = np.int64(state.ctypes.data)
    pair = np.int64(handles.ctypes.data) + CALL * handles.itemsize
    outcount, indices, statuses = base + 8 * OUTCOUNT, base + 8 * INDICES, base + 8 * STATUS
    function = state[FUNCTION:]
    noticed = carray_at(state[NOTICED], 1, state)
    for _ in range(polls):
        error = c_int(function[libmpi.TESTSOME], (np.int32(2), pair, outcount, indices,
                                                  statuses))
        if error:
            state[ERROR] = error
            return FAILED
        found = state[OUTCOUNT:OUTCOUNT + 1].view(np.int32)[0]
        done = found == state[UNDEFINED]
        for j in range(max(found, 0)):
            if state[INDICES:INDICES + 1].view(np.int32)[j] == 0:
                done = True
            else:
                noticed[0] = 1
        if done:
            return NOTICE if noticed[0] else DONE
    return PENDING


def _start(send, recv, state, handles, polls):
    recv_n, itemsize = recv.size, recv.itemsize
    send_at, recv_at = np.int64(send.ctypes.data), np.int64(recv.ctypes.data)
    if state[RECV_N] < 0:           # not used: no address, no overlap
        recv_n, recv_at = 0, np.int64(0)
    elif not plain(recv, True) or recv_n != state[RECV_N]:
        return MISMATCH
    if state[IN_PLACE] != 0:
        send_at = state[IN_PLACE]
    elif not plain(send, False) or send.size != state[SEND_N] or \
            send.size and recv_n and send_at < recv_at + recv_n * itemsize and \
            recv_at < send_at + send.size * itemsize:
        return MISMATCH
    return _post(send_at, recv_at, state, handles, polls)


def _post(send_at, recv_at, state, handles, polls):
    request = np.int64(handles.ctypes.data) + CALL * handles.itemsize
    function = state[FUNCTION:]
    state[STARTED] = np.int64(c_double(function[libmpi.WTIME]) * 1e9)
    kind, count = state[KIND], np.int32(state[COUNT])
    datatype, op, comm = handles[DATATYPE], handles[OP], handles[COMM]
    root = np.int32(state[ROOT])
    row = state[ROW]
    recv_counts, recv_displs = state[VECTORS] + RECV_COUNTS * row, \
        state[VECTORS] + RECV_DISPLS * row
    if kind == libmpi.START:
        error = c_int(function[kind], (request,))
    elif kind == libmpi.IALLREDUCE:
        error = c_int(function[kind], (send_at, recv_at, count, datatype, op, comm,
                                        request))
    elif kind == libmpi.IREDUCE_SCATTER:
        error = c_int(function[kind], (send_at, recv_at, recv_counts, datatype, op,
                                        comm, request))
    elif kind == libmpi.IALLGATHERV:
        error = c_int(function[kind], (send_at, count, datatype, recv_at, recv_counts,
                                        recv_displs, datatype, comm, request))
    elif kind == libmpi.IALLTOALLV:
        error = c_int(function[kind], (send_at, state[VECTORS] + SEND_COUNTS * row,
                                        state[VECTORS] + SEND_DISPLS * row, datatype,
                                        recv_at, recv_counts, recv_displs, datatype, comm,
                                        request))
    elif kind == libmpi.IBCAST:
        error = c_int(function[kind], (recv_at, count, datatype, root, comm, request))
    elif kind == libmpi.IREDUCE:
        error = c_int(function[kind], (send_at, recv_at, count, datatype, op, root, comm,
                                        request))
    else:
        error = c_int(function[kind], (send_at, count, datatype, recv_at, count,
                                        datatype, comm, request))
    if error:
        state[ERROR] = error
        return START_FAILED
    return _test(state, handles, polls)
