"""A bound schedule run from compiled code: the fast executor of the scheduled algorithms.

A :class:`~.executor.Binding` used a second time (a repeated call on the same buffers, a
non-blocking call's or a persistent request's second start on them) gets a :class:`Runner`:
its steps as tables in one int64 array -- per step its messages (address, count, peer,
direction), packing, local work and per-message work on arrival; the work as copy,
pairwise-reduction and one-pass row-reduction records over raw addresses -- and one
Numba-compiled function (:func:`_compiled`) that runs them: it packs, posts the step's
messages with ``MPI_Irecv``/``MPI_Isend`` (through the library's function pointers,
:mod:`.libmpi`), tagged as :func:`.executor.step_tag` says for the run's first tag, does the
step's local work, polls ``MPI_Testsome`` and does each arrival's work as it lands, then the
next step, all without returning to Python; the last step's ``MPI_Testsome`` also tests the
context's receive of revocation notices, so a run finds a notice as the other executor's
operations do, in the same call.

Deadlines and failures stay with :class:`~.operation.Operation`: the function polls a number
of times (as many idle polls as every wait spins before it yields the core, :mod:`.progress`)
and returns :data:`PENDING`; the operation then yields the core between further calls of
one poll each, checks the step's deadline (counted from just before the step's posts, as on
the other executor) and another rank's revocation notices, and on any failure abandons the
binding as it always does.  So ``HPCCOLL_TIMEOUT``, revocation and the memory held after a
failure are unchanged (:meth:`Runner.in_flight` gives the operation the step's requests).
The runner's :class:`~.entry.Bound` (C) checks the buffers it is given against the bound
ones (dtype, addresses, sizes, layout, writability) and calls the function by address
(:func:`functions`), with no Numba dispatch: a repeat on other arrays is :data:`MISMATCH`,
and the caller binds them in Python.

It runs where every piece is compiled: host memory, no shared window, a dtype Numba computes
with (not float16; booleans only when reducing), an op with a kernel (MPI's predefined ones)
an MPI library :mod:`.libmpi` knows, and messages of at most 2^31-1 elements (counts pass as
C ints); elsewhere the Python executor runs.  What it runs is compiled once per handle
width (a first use in a fresh cache compiles for a few seconds); a reduction per op and
dtype (and, where the C code was not built, the check of the arrays per dtype and layout:
:func:`_checked`) compile in well under a second each; all are cached on disk, compiled by
one process of a node at a time (:func:`.kernels.compiling`).
"""

from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING, Any

import numpy as np
from mpi4py import MPI

from ..schedule import Region
from . import buffers, entry, libmpi, progress
from .kernels import Reduction, compiling, reduce_pair, reduce_strided, work_refusal
from .libmpi import DONE, FAILED, MISMATCH, NOTICE, PENDING, c_double, c_int, carray_at, plain
from .progress import COMPLETED
from .ops import terms

if TYPE_CHECKING:
    from .executor import Binding
    from .progress import Guard

# the state array's header: where the run is, then the call's constants, the tables' places,
# the addresses of the op's reductions (:func:`_reducer`) and of the library's functions
# (NOTICED: the address of the guard's ``noticed`` flag; LISTENING: the index among the
# requests of the guard's receive of revocation notices, after the last step's messages)
(POSITION, POSTED, REMAINING, ERROR, STEP_TIME, STEPS, SEND_AT, SEND_N, RECV_AT, RECV_N,
 IN_PLACE, NOTICED, LISTENING, TAG_SPAN, UNDEFINED, OUTCOUNT, STEP_TABLE, MESSAGE_TABLE,
 ARRIVAL_TABLE, OP_TABLE, INDICES, STATUSES, REDUCE_PAIR, REDUCE_ROWS, FUNCTION) = range(25)
HEADER = FUNCTION + len(libmpi.FUNCTIONS)
# a step's row: its index in the program (for its tag), its messages (first, count) among
# the requests, its packing and local work (each table's last name: its rows' length)
INDEX, REQ_FIRST, REQ_N, PACK_FIRST, PACK_END, LOCAL_FIRST, LOCAL_END, STEP_WORDS = range(8)
# a message's row: the function posting it (MPI_Irecv or MPI_Isend), address, count, peer
POST, ADDRESS, ELEMENTS, PEER, MESSAGE_WORDS = range(5)
# the handles array: the communicator, the datatype, then the requests' (the notice receive last)
COMM, DATATYPE, REQUESTS = range(3)
LARGEST_COUNT = 2**31 - 1           # elements in a message
# a record of work: what, where to, from where (a, b), how many elements (bytes to copy), rows
KIND, DST, A, B, COUNT, ROWS, OP_WORDS = range(7)
COPY, PAIR, STRIDED = range(3)


def refusal(dtype: np.dtype, reduces: bool, window: bool = False, on_host: bool = True,
            largest: int = 0, op: str | None = "sum") -> str | None:
    """Why a :class:`Runner` does not run a binding on arrays of ``dtype`` of a call that
    ``reduces`` (with ``op``: a kernel's op name, None for an op without one), whose program
    uses a shared ``window``, on host memory (``on_host``) or not, with messages of up to
    ``largest`` elements (None: it does)."""
    unworkable = work_refusal(dtype, reduces, window)
    if unworkable is not None:
        return unworkable
    if not on_host:
        return "device arrays"
    if reduces and op is None:
        return "an op without a compiled kernel"
    if largest > LARGEST_COUNT:
        return "messages beyond 2^31-1 elements (the compiled executor passes C ints)"
    if not libmpi.available():
        return f"the compiled executor does not know {MPI.get_vendor()[0]}"
    return None


def runs(binding: Binding, reduction: Reduction | None) -> bool:
    """Whether a :class:`Runner` can run ``binding`` reducing with ``reduction`` (None: the
    call reduces nothing): :func:`refusal` has no reason against it."""
    plan = binding.plan
    largest = max((t.count for _, step in plan.steps for t in (*step.sends, *step.recvs)),
                  default=0)
    return refusal(plan.dtype, reduction is not None, binding.window is not None,
                   binding.memory_kind == buffers.HOST, largest,
                   reduction and reduction.op) is None


def executor(family: str, dtype: np.dtype, reduces: bool) -> str:
    """Which executor runs a blocking call of an algorithm of ``family`` on host arrays of
    ``dtype`` with a predefined op where it ``reduces`` (what ``hpccoll explain`` says,
    from :func:`refusal`)."""
    reason = refusal(dtype, reduces, window=family == "csc")
    if reason is not None:
        return f"hpccoll's schedule executor in Python ({reason})"
    return (f"compiled from a call's second run on the same buffers: each step's MPI_Irecv, "
            f"MPI_Isend and MPI_Testsome of {MPI.get_vendor()[0]}, packing, copies and "
            "reductions in one Numba function (the first run, device arrays and "
            "user-defined ops on the schedule executor in Python)")


class Runner:
    """A binding's steps on the compiled executor, run by :meth:`start` (the compiled
    executors' one entry, as :meth:`.native.NativeCall.start`): done at once, or in flight
    -- this runner then completes it (``test()``, ``wait()``), anything but a clean
    completion in an :class:`~.operation.Operation`.  ``function(send, recv, state,
    handles, polls, tag)`` with the bound arrays (``send`` is ``recv`` when there is none)
    runs or resumes the call whose first tag is ``tag``, polling a step ``polls`` times
    before it returns :data:`PENDING` (0: post the first step and return).  It may run while
    ``binding.runner is`` this runner (the binding not freed or abandoned) and
    ``binding.busy`` is false (no run in flight on it)."""

    __slots__ = ("binding", "state", "handles", "bound", "send", "recv", "polls", "reduce",
                 "guard", "tag", "memory", "operation")

    def __init__(self, binding: Binding, reduce: Reduction | None, comm: MPI.Comm,
                 guard: Guard):
        self.binding, self.reduce, self.guard = binding, reduce, guard
        self.tag, self.memory, self.operation = 0, (), None     # the run in flight
        send, recv = binding.views["send"], binding.views["recv"]
        in_place = send.size == 0
        self.send, self.recv = (recv if in_place else send), recv
        tables = _tables(binding)
        messages = len(tables["messages"])
        most = max((n for _, _, n, *_ in tables["steps"]), default=0)
        at = HEADER
        places = {}
        for name, words in (("steps", len(tables["steps"]) * STEP_WORDS),
                            ("messages", messages * MESSAGE_WORDS), ("arrivals", 2 * messages),
                            ("ops", len(tables["ops"]) * OP_WORDS),
                            ("indices", (most + 1) // 2 + 1),
                            ("statuses", (most + 1) * libmpi.STATUS_WORDS)):
            places[name], at = at, at + words
        state = self.state = np.zeros(at, np.int64)
        state[STEPS], state[STEP_TABLE], state[MESSAGE_TABLE], state[ARRIVAL_TABLE] = \
            len(tables["steps"]), places["steps"], places["messages"], places["arrivals"]
        state[OP_TABLE], state[INDICES], state[STATUSES] = \
            places["ops"], places["indices"], places["statuses"]
        state[SEND_AT], state[SEND_N] = self.send.ctypes.data, self.send.size
        state[RECV_AT], state[RECV_N], state[IN_PLACE] = recv.ctypes.data, recv.size, in_place
        state[NOTICED], state[LISTENING], state[TAG_SPAN], state[UNDEFINED] = \
            guard.noticed.ctypes.data, messages, guard.tag_span, MPI.UNDEFINED
        state[FUNCTION:HEADER] = libmpi.addresses()
        for name in ("steps", "messages", "arrivals", "ops"):
            rows = np.asarray(tables[name], np.int64).reshape(-1)
            state[places[name]:places[name] + rows.size] = rows
        self.handles = np.array([libmpi.handle(comm), libmpi.handle(binding.mpi_type),
                                 *[libmpi.handle(MPI.REQUEST_NULL)] * messages,
                                 libmpi.handle(guard.listening)], libmpi.handle_dtype())
        self.polls = progress.idle_polls()
        if reduce is not None:          # (compiled for the kinds of reduction it has)
            for kind in {row[KIND] for row in tables["ops"]} - {COPY}:
                state[REDUCE_PAIR + kind - PAIR] = _reducer(reduce.op, binding.plan.dtype,
                                                            kind)
        self.bound = self._bind()

    def start(self, send: np.ndarray | None, recv: np.ndarray | None, tag: int, polls: int
              ) -> Any:
        """Run on ``send`` (None: in place) and ``recv`` (None where the rank's receive
        buffer is not used: the bound one stands in), tagged from ``tag``, polling each step
        ``polls`` times (0: post the first step): :data:`~.progress.COMPLETED` if done, this
        runner in flight (``test()``/``wait()`` complete it), or None (nothing sent) if the
        binding is freed, abandoned or busy, or the arrays are not the bound ones.  A run
        that fails or meets a notice raises as an operation's does."""
        if self.busy:
            return None
        code = self.bound(send, recv, polls, tag)
        if code == DONE:
            return COMPLETED
        if code == MISMATCH:
            return None
        return self.resume(code, send, recv, tag)

    def resume(self, code: int, send: Any, recv: Any, tag: int) -> Any:
        """The run the compiled function left with ``code`` (neither done nor a mismatch)
        on ``send`` and ``recv``, tagged from ``tag``: this runner in flight, or an
        operation (a failure, a notice: raises there)."""
        self.tag, self.memory = tag, (send, recv)
        if code == PENDING:
            self.operation, self.binding.busy = None, True
            return self
        return self._continue(code)

    @property
    def busy(self) -> bool:
        """Whether nothing may run on this runner now: a run in flight on its binding, or
        the binding freed or abandoned."""
        binding = self.binding
        return binding.runner is not self or binding.busy

    def _bind(self) -> Any:
        """This runner's compiled function bound to its state (:func:`.entry.bind`; run and
        resume are the same function, which runs from where the state is): the buffers at
        their bound addresses only, the receive one bound where the caller passes none."""
        state, handles, bound_send, bound_recv = self.state, self.handles, self.send, self.recv
        send = (-1, 0) if state[IN_PLACE] else (int(state[SEND_N]), int(state[SEND_AT]))

        def dispatched() -> entry.Dispatched:
            function = _compiled()
            return entry.Dispatched(
                lambda s, r, polls, tag: function(
                    (bound_recv if r is None else r) if s is None else s,
                    bound_recv if r is None else r, state, handles, polls, tag),
                lambda polls, tag: function(bound_send, bound_recv, state, handles, polls, tag))
        return entry.bind(functions, state, handles, self.binding.plan.dtype, send,
                          (int(state[RECV_N]), int(state[RECV_AT])), dispatched)

    def test(self) -> bool:
        if self.operation is None:
            if not self.binding.busy:
                return True
            self._continue(PENDING)
        return self.operation.test()

    def wait(self) -> None:
        if self.operation is None:
            if not self.binding.busy:
                return
            code = self.bound.resume(self.polls, self.tag)
            if code == DONE:
                self.binding.busy, self.memory = False, ()
                return
            self._continue(code)
        self.operation.wait()

    def _continue(self, code: int) -> Any:
        """The run, where the function left it with ``code``, to an operation (which holds
        the arrays meanwhile)."""
        from .operation import Operation        # (operation.py imports this module)
        memory, self.memory = self.memory, ()
        self.operation = Operation.resume(self, code, memory, self.tag)
        return self.operation

    def step(self) -> int:
        """The step the run is at (an index into the binding's steps)."""
        return int(self.state[POSITION])

    def started(self) -> float:
        """When the current step was posted (``MPI.Wtime``'s clock)."""
        return self.state[STEP_TIME] / 1e9

    def error(self) -> MPI.Exception:
        """The MPI error a :data:`FAILED` run met."""
        return MPI.Exception(int(self.state[ERROR]))

    def rewind(self) -> None:
        """Forget a run the Python executor finished (the next starts at the first step)."""
        self.state[POSITION] = self.state[POSTED] = 0

    def in_flight(self) -> list[MPI.Request]:
        """The current step's requests (as its peers list them; completed ones null), for the
        operation that abandons or times out the run."""
        position = int(self.state[POSITION])
        if position >= self.state[STEPS]:
            return []
        row = self.state[STEP_TABLE] + position * STEP_WORDS
        first = REQUESTS + int(self.state[row + REQ_FIRST])
        mask = (1 << 8 * self.handles.itemsize) - 1
        return [MPI.Request.fromhandle(int(h) & mask)
                for h in self.handles[first:first + int(self.state[row + REQ_N])]]


def _tables(binding: Binding) -> dict[str, list[tuple[int, ...]]]:
    """The rows of a binding's step, message, arrival and work tables."""
    plan = binding.plan
    itemsize = plan.dtype.itemsize
    base = {name: view.ctypes.data for name, view in binding.views.items()}
    staging = binding.staging.ctypes.data
    ops: list[tuple[int, ...]] = []

    def at(region: Region) -> int:
        return base[region.buffer] + region.offset * itemsize

    def work(op: Any) -> None:
        srcs, stride = terms(op)
        n = op.dst.count
        if len(srcs) == 1:
            ops.append((COPY, at(op.dst), at(srcs[0]), 0, n * itemsize, 0))
        elif stride is not None:
            ops.append((STRIDED, at(op.dst), at(srcs[0]), stride, n, len(srcs)))
        else:
            ops.append((PAIR, at(op.dst), at(srcs[0]), at(srcs[1]), n, 0))
            ops.extend((PAIR, at(op.dst), at(op.dst), at(s), n, 0) for s in srcs[2:])

    def move(regions: tuple[Region, ...], packed_at: int, gather: bool) -> None:
        for region in regions:
            packed = staging + packed_at * itemsize
            nbytes = region.count * itemsize
            ops.append((COPY, packed, at(region), 0, nbytes, 0) if gather else
                       (COPY, at(region), packed, 0, nbytes, 0))
            packed_at += region.count

    steps, messages, arrivals = [], [], []
    for compiled in binding.steps_by_parity[0]:
        first = len(ops)
        for (way, transfer), packed_at in compiled.messages:
            if way == "to" and packed_at is not None:
                move(transfer.regions, packed_at, gather=True)
        packed = len(ops)
        for op in plan.program.steps[compiled.index].local:
            work(op)
        steps.append((compiled.index, len(messages), len(compiled.messages), first, packed,
                      packed, len(ops)))
        for (way, transfer), packed_at in compiled.messages:
            start = len(ops)
            if way == "from":
                if packed_at is not None:
                    move(transfer.regions, packed_at, gather=False)
                for op in transfer.on_arrival:
                    work(op)
            arrivals.append((start, len(ops)))
            address = at(transfer.regions[0]) if packed_at is None else \
                staging + packed_at * itemsize
            messages.append((libmpi.IRECV if way == "from" else libmpi.ISEND, address,
                             transfer.count, transfer.peer))
    return {"steps": steps, "messages": messages, "arrivals": arrivals, "ops": ops}


@lru_cache(maxsize=1)
def _compiled() -> Any:
    """``function(send, recv, state, handles, polls, tag)`` compiled (Numba imported on first
    use); see the module doc and :class:`Runner`.  :func:`_checked` checks the arrays (Numba
    specialises it for their dtypes and layouts: a few lines each; the runner's
    :class:`~.entry.Dispatched`, where the C code was not built) and calls :func:`_run`,
    compiled once for every dtype and op (copies move bytes, reductions call the C functions
    of the call's op and dtype, :func:`_reducer`, whose addresses the state holds).  ``_run``
    is compiled in place, a global of ``_checked``, as :func:`.native._compiled` says why."""
    global _run
    from numba import njit
    libmpi.register()
    _run = njit(cache=True)(_run)
    return njit(cache=True)(_checked)


@lru_cache(maxsize=1)
@compiling()
def functions() -> tuple[int, int]:
    """The addresses of ``int64 run(send_at, recv_at, state_at, state_n, handles_at,
    handles_n, polls, tag)``, :func:`_run` on the arrays at those addresses (the buffers,
    checked by the caller against the bound ones, unused: the :class:`~.entry.Bound`), run
    and resume alike.  Compiled once per handle width, cached on disk."""
    from numba import cfunc, types
    _compiled()
    like_state, like_handles = np.empty(0, np.int64), np.empty(0, libmpi.handle_dtype())

    @cfunc(types.int64(*[types.int64] * 8), cache=True)
    def run(send_at, recv_at, state_at, state_n, handles_at, handles_n, polls, tag):
        return _run(carray_at(state_at, state_n, like_state),
                    carray_at(handles_at, handles_n, like_handles), polls, tag)
    return run.address, run.address


def _checked(send, recv, state, handles, polls, tag):
    if recv.size != state[RECV_N] or np.int64(recv.ctypes.data) != state[RECV_AT] or \
            not plain(recv, True):
        return MISMATCH
    if state[IN_PLACE] == 0 and (
            send.size != state[SEND_N] or np.int64(send.ctypes.data) != state[SEND_AT]
            or not plain(send, False)):
        return MISMATCH
    return _run(state, handles, polls, tag)


@lru_cache(maxsize=None)
@compiling()
def _reducer(op: str, dtype: np.dtype, kind: int) -> int:
    """The address of ``int f(dst, a, b, n, rows)`` reducing with ``op`` on ``dtype``
    (compiled, cached on disk) the records of ``kind``: :data:`PAIR`, ``dst = a op b`` over
    ``n`` elements, or :data:`STRIDED`, ``rows`` sources ``b`` elements apart from ``a``."""
    from numba import cfunc, types
    from .kernels import _jit
    _jit()                  # registers the reduction bodies
    libmpi.register()
    like = np.empty(0, dtype)
    word = types.int64

    if kind == PAIR:
        def reduce(dst, a, b, n, rows):
            reduce_pair(op, carray_at(dst, n, like), carray_at(a, n, like),
                        carray_at(b, n, like))
            return 0
    else:
        def reduce(dst, a, b, n, rows):
            reduce_strided(op, carray_at(dst, n, like), carray_at(a, (rows - 1) * b + n, like),
                           b, rows)
            return 0
    return cfunc(types.int32(word, word, word, word, word), cache=True)(reduce).address


def _run(state, handles, polls, tag):
    """The compiled executor's run from where ``state`` says it is (see :func:`_compiled`)."""
    function = state[FUNCTION:HEADER]
    comm, datatype = handles[COMM], handles[DATATYPE]
    requests_at = np.int64(handles.ctypes.data) + REQUESTS * handles.itemsize
    base = np.int64(state.ctypes.data)
    outcount = base + 8 * OUTCOUNT
    indices_at, statuses = base + 8 * state[INDICES], base + 8 * state[STATUSES]
    undefined = state[UNDEFINED]
    octets = state[:0].view(np.uint8)
    noticed = carray_at(state[NOTICED], 1, state)

    def work(first, end):
        for k in range(first, end):
            row = state[OP_TABLE] + k * OP_WORDS
            kind, n = state[row + KIND], state[row + COUNT]
            if kind == COPY:
                dst, src = carray_at(state[row + DST], n, octets), \
                    carray_at(state[row + A], n, octets)
                for i in range(n):
                    dst[i] = src[i]
            else:
                c_int(state[REDUCE_PAIR + kind - PAIR], (state[row + DST], state[row + A],
                                                          state[row + B], n,
                                                          state[row + ROWS]))

    while state[POSITION] < state[STEPS]:
        step = state[STEP_TABLE] + state[POSITION] * STEP_WORDS
        first, n = state[step + REQ_FIRST], np.int32(state[step + REQ_N])
        if state[POSTED] == 0:
            work(state[step + PACK_FIRST], state[step + PACK_END])
            # timed before the posts: a peer's next step waits for them, so its deadline is later
            state[STEP_TIME] = np.int64(c_double(function[libmpi.WTIME]) * 1e9)
            span = state[TAG_SPAN]
            step_tag = np.int32(tag - tag % span + (tag + state[step + INDEX]) % span)
            for k in range(first, first + n):
                row = state[MESSAGE_TABLE] + k * MESSAGE_WORDS
                error = c_int(function[state[row + POST]], (
                    state[row + ADDRESS], np.int32(state[row + ELEMENTS]), datatype,
                    np.int32(state[row + PEER]), step_tag, comm,
                    requests_at + k * handles.itemsize))
                if error:
                    state[ERROR] = error
                    return FAILED
            work(state[step + LOCAL_FIRST], state[step + LOCAL_END])
            state[POSTED], state[REMAINING] = 1, n
            if n and polls == 0:
                return PENDING
        polled = 0
        # the last step's polls test the notice receive too (it follows its messages)
        polled_n = n + np.int32(state[POSITION] + 1 == state[STEPS])
        while state[REMAINING] > 0:
            if polled == polls:
                return PENDING
            polled += 1
            state[OUTCOUNT] = 0
            error = c_int(function[libmpi.TESTSOME], (polled_n, requests_at + first *
                                                      handles.itemsize, outcount,
                                                      indices_at, statuses))
            if error:
                state[ERROR] = error
                return FAILED
            done = state[OUTCOUNT:OUTCOUNT + 1].view(np.int32)[0]
            if done == undefined:           # none active: all completed
                break
            indices = state[state[INDICES]:].view(np.int32)
            for j in range(done):
                request = first + indices[j]
                if request == state[LISTENING]:
                    noticed[0] = 1
                    continue
                arrival = state[ARRIVAL_TABLE] + 2 * request
                work(state[arrival], state[arrival + 1])
                state[REMAINING] -= 1
        state[POSITION] += 1
        state[POSTED] = 0
    state[POSITION] = 0
    last = state[STEP_TABLE] + (state[STEPS] - 1) * STEP_WORDS
    if noticed[0] == 0 and (state[STEPS] == 0 or state[last + REQ_N] == 0):
        # the last step sent nothing, so nothing polled the notice receive: once now
        error = c_int(function[libmpi.TESTSOME], (np.int32(1), requests_at + state[LISTENING] *
                                                  handles.itemsize, outcount, indices_at,
                                                  statuses))
        if error:
            state[ERROR] = error
            return FAILED
        if state[OUTCOUNT:OUTCOUNT + 1].view(np.int32)[0] == 1:
            noticed[0] = 1
    return NOTICE if noticed[0] else DONE

