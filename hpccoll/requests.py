"""The request objects a started collective returns: :class:`Request` (non-blocking),
:class:`PersistentRequest` (start/wait many times) and :class:`NativeOperation`, the MPI
library's own non-blocking collective under the same test/wait and deadline as the
scheduled algorithms' operations.  A start runs on a compiled executor where one serves
the call (``start(send, recv, tag, polls)``: :meth:`~.runtime.native.NativeCall.start`,
:meth:`~.runtime.scheduled.Runner.start`, :meth:`NativePersistent.start`), which hands back
the run -- :data:`~.runtime.progress.COMPLETED`, or the executor itself in flight -- or
nothing, and the call is then prepared in Python (:meth:`~hpccoll.prepared.Prepared.start`).
An executor runs one call at a time and is started again later, so a request stops
consulting it once complete (``test()`` True or ``wait()`` returned)."""

from __future__ import annotations

import time
import weakref
from typing import TYPE_CHECKING, Any, Callable

import numpy as np
from mpi4py import MPI

from . import settings
from .runtime import abandoned, libmpi
from .runtime.agreement import gather_rows
from .runtime.entry import Dispatched, Started, copy_bound
from .runtime.libmpi import PENDING
from .runtime.native import NativeCall
from .runtime.operation import Operation
from .runtime.progress import COMPLETED, Guard, deadline_from, wait_requests

if TYPE_CHECKING:
    from .prepared import Prepared


class Request(Started):
    """A started collective: ``test()`` makes progress without blocking, ``wait()`` completes;
    after completion both return at once (``wait()`` twice is harmless).  A ``wait()`` or
    ``test()`` that raises ends the run too (its transfers left to
    :mod:`~.runtime.abandoned`).  Its base (:class:`~.runtime.entry.Started`) is C where
    the C entry was built."""

    __slots__ = ()


def request_of(started: Any, kind: type[Request] | None = None) -> Request:
    """The request (a ``kind``, :class:`Request` by default) of the run ``started`` (an
    operation, or a compiled executor in flight): a compiled native call is resumed from
    C."""
    kind = kind or Request
    if type(started) is NativeCall:
        return kind(started, started.bound, PENDING, started.polls)
    return kind(started)


class PersistentRequest(Request):
    """A collective planned once and run many times on the same buffers: ``start()`` then
    ``wait()`` (or ``test()``), again and again; ``free()`` ends its use.

    States as MPI's persistent requests: inactive (made, or completed) -> ``start()`` ->
    active -> ``wait()``/``test()`` True -> inactive.  ``start()`` or ``free()`` while active
    raise RuntimeError; ``wait()``/``test()`` while inactive return at once; after ``free()``
    only ``free()`` (harmless) and ``wait()``/``test()`` are allowed.  A ``wait()`` or
    ``test()`` that raises (the failure model: a deadline, a revocation) ends the run too:
    the request is inactive, its next ``start()`` raises CommunicatorRevoked, and ``free()``
    leaves MPI's request to :mod:`~.runtime.abandoned` until its transfers complete.

    A start runs on the request's compiled executor where it has one: for a scheduled
    algorithm, the runner of its binding once a run has been on the compiled executor
    (:mod:`hpccoll.runtime.scheduled`, from the second start); for the native one, the
    library's persistent collective where it has one (MPI-4's ``MPI_<Collective>_init``,
    made here, started by ``MPI_Start``: :class:`NativePersistent`), else the compiled
    native executor (on a state of its own); anything but a clean completion goes to an
    :class:`~hpccoll.runtime.operation.Operation` (deadline, notices, failure) as on the
    first run.  On the compiled native executor, ``start()``, ``wait()`` and ``test()`` run
    from C while runs are clean (:class:`~.runtime.entry.Started`, armed here), and so do
    the runs on no executor (one rank's copy of the send buffer, a call that moves
    nothing); a run done at its start leaves the request active until waited or tested."""

    __slots__ = ("_prepared", "_send", "_recv", "_slot", "_tag", "_freed", "_executor",
                 "_persistent", "_copy", "_arguments")
    start = Started._run_start      # (C where built: self._start() unless the run is armed)

    def __init__(self, prepared: "Prepared", sendbuf: Any, recvbuf: Any):
        super().__init__(None)
        self._prepared, self._send, self._recv = prepared, sendbuf, recvbuf
        self._slot = prepared.ctx.next_slot()
        self._tag = prepared.tag(self._slot)
        self._freed = False
        self._executor: Any = None      # the compiled executor a start runs on, once known
        self._persistent: NativePersistent | None = None
        self._copy = None       # one rank, a scheduled algorithm: (recv, send) flat views
        if prepared.local_copy and sendbuf is not None:
            self._copy = (recvbuf.reshape(-1), sendbuf.reshape(-1))
        # what a start passes its executor (one tuple: a call that adds to it is slower)
        self._arguments = (sendbuf, None if prepared.ignores_recv else recvbuf, self._tag, 0)
        if prepared.plan is None and not prepared.moves_nothing:
            self._persistent = NativePersistent.of(prepared, sendbuf, recvbuf)
            if self._persistent is not None:
                self._executor = self._persistent.executor
            elif prepared.compiled is not None:
                self._executor = prepared.compiled.twin()
            executor = self._executor
            if isinstance(executor, NativeCall) and not isinstance(executor.bound, Dispatched):
                self._arm(executor.bound, executor, self._arguments[:2], prepared.ctx,
                          settings, PENDING, executor.polls, self._tag)
        elif (prepared.local_copy or prepared.moves_nothing) and not prepared.on_device:
            # done at the start, from C: the send buffer's copy (the arrays checked, as the
            # executors' runs check them), or nothing (in place, none to send, zero elements)
            copies = self._copy is not None and sendbuf.size > 0
            bound = copy_bound(recvbuf.dtype, *((sendbuf.size, recvbuf.size) if copies else
                                               (None, None)))
            self._arm(bound, None, self._arguments[:2], prepared.ctx, settings, PENDING, 0,
                      self._tag)

    @property
    def active(self) -> bool:
        return self._operation is not None

    def _start(self) -> None:
        """``start()`` in Python (where the C one does not start the run itself)."""
        if self._freed:
            raise RuntimeError("persistent collective started after free()")
        if self._operation is not None:
            raise RuntimeError("persistent collective started again before it completed "
                               "(wait() or test() first)")
        prepared = self._prepared
        if settings.fast and prepared.ctx.revoked is None:
            executor = self._executor
            if executor is not None:
                run = executor.start(*self._arguments)
                if run is not None:
                    self._operation = run
                    return
            elif prepared.local_copy:
                if self._copy is not None:
                    self._copy[0][...] = self._copy[1]
                self._operation = COMPLETED
                return
        self._operation = operation = prepared.start(self._send, self._recv, self._slot)
        if isinstance(operation, Operation) and not prepared.on_device:
            # scheduled, on the user's host arrays: later starts run on its binding's runner
            runner = operation.runner
            if runner is not None:
                self._executor = runner
                self._arguments = (runner.send, runner.recv, self._tag, 0)

    def free(self) -> None:
        if self.active:
            raise RuntimeError("persistent collective freed while active (wait() first)")
        if not self._freed:
            self._freed = True
            self._disarm()
            if self._persistent is not None:
                self._persistent.free()
            self._executor = self._persistent = self._copy = None


class NativePersistent:
    """The MPI library's own persistent collective (MPI-4), made once for a persistent
    request's buffers (:meth:`of`) and started (``MPI_Start``) by its ``executor``: the
    compiled native executor where it runs with this library
    (:meth:`~.runtime.native.NativeCall.persistent`), else :meth:`start`, which returns a
    :class:`NativeOperation` on it -- either way its test, wait, deadline and failures are
    those of every native call.  A persistent collective matches only the same persistent
    collective on the other ranks, so the ranks agree, when the request is made, to use it
    (every rank's buffers on the host); the MPI request is freed by :meth:`free`, or when
    this is collected, unless a failed run left it to :mod:`~.runtime.abandoned`."""

    __slots__ = ("held", "label", "memory", "guard", "compiled", "__weakref__")

    def __init__(self, request: MPI.Prequest, label: str, memory: tuple, guard: Guard):
        self.held = _Held(request)
        self.label, self.memory, self.guard = label, memory, guard
        self.compiled = None
        if libmpi.available():
            self.compiled = self.held.operation = NativeCall.persistent(request, label, guard)
        weakref.finalize(self, self.held.free)

    @property
    def executor(self) -> Any:
        """What a start runs on (``start(send, recv, tag, polls)``)."""
        return self if self.compiled is None else self.compiled

    @staticmethod
    def of(prepared: "Prepared", send: Any, recv: Any) -> "NativePersistent | None":
        """The library's persistent collective for ``prepared`` (the native algorithm) on
        ``send`` (None when there is none) and ``recv``, if every rank's buffers are host
        memory and the library has it; None if not.  Collective over the communicator (one
        agreement under the deadline), as making the persistent request is."""
        ctx = prepared.ctx
        ctx.check()                 # (revoked: raises before the agreement's message)
        everyone = gather_rows(ctx.comm, np.array([not prepared.on_device], np.int8),
                               f"{prepared.label}: agreeing on a persistent request", ctx)
        if not everyone.all():
            return None
        try:
            request = prepared.init_native(send, recv)
        except NotImplementedError:         # (the library has no MPI-4 persistent collectives)
            return None
        except MPI.Exception as error:
            raise ctx.fail(error) from None
        return NativePersistent(request, prepared.label, (send, recv), ctx)

    def start(self, send: Any, recv: Any, tag: int, polls: int) -> Any:
        """Start the collective (on its own buffers, which ``send``/``recv`` are; the
        persistent request starts it only when inactive; the library tags and polls it):
        its operation, made at the first start and armed again at each.  Never None: a
        fall-back to another form of the collective would not match the other ranks'
        persistent one."""
        held = self.held
        operation = held.operation
        try:
            held.request.Start()
        except MPI.Exception as error:
            raise self.guard.fail(error) from None
        if operation is None:
            operation = held.operation = NativeOperation(self.label, held.request, _nothing,
                                                         self.memory, self.guard)
        else:
            operation.rearm(self.memory)
        return operation

    def free(self) -> None:
        self.held.free()


class _Held:
    """A persistent MPI request and what runs it (its last run's operation, or the compiled
    call): freed once, and only when inactive (``done``: a run that failed left it in
    flight, held by :mod:`~.runtime.abandoned`)."""

    __slots__ = ("request", "operation")

    def __init__(self, request: MPI.Prequest):
        self.request, self.operation = request, None

    def free(self) -> None:
        request, self.request = self.request, None
        if request is not None and (self.operation is None or self.operation.done) and \
                not MPI.Is_finalized():
            request.Free()


def _nothing() -> None:
    pass


class NativeOperation:
    """The MPI library's own non-blocking collective, with the same test/wait, deadline and
    failure handling as the scheduled algorithms' operations (``memory``: the arrays MPI
    uses, held until it completes, or by :mod:`~hpccoll.runtime.abandoned` if it never
    does)."""

    def __init__(self, label: str, request: MPI.Request, on_done: Callable[[], None],
                 memory: tuple, guard: Guard):
        self.label, self.request, self.on_done = label, request, on_done
        self.guard = guard
        self.rearm(memory)

    def rearm(self, memory: tuple) -> None:
        """In flight again (a persistent request started again), its deadline from now."""
        self.memory, self.done = memory, False
        self.deadline = deadline_from(time.monotonic())

    def test(self) -> bool:
        if self.done:
            return True
        try:
            complete = self.request.Test()
        except BaseException as error:
            abandoned.hold(self.label, [self.request], *self.memory)
            raise self.guard.fail(error) from None
        if complete:
            self._finish()
        elif self.deadline is not None and time.monotonic() > self.deadline:
            self.wait()
        return self.done

    def wait(self) -> None:
        if not self.done:
            wait_requests([self.request], self.label, self.deadline, self.memory, self.guard)
            self._finish()

    def _finish(self) -> None:
        self.done = True
        self.memory = ()
        self.on_done()
        self.guard.check_notices()
