"""The request objects a started collective returns: :class:`Request` (non-blocking),
:class:`PersistentRequest` (start/wait many times), :class:`NativeOperation`, the MPI
library's own non-blocking collective under the same test/wait and deadline as the
scheduled algorithms' operations, :class:`Started` and :class:`NativeStarted`, runs the
compiled executors started without an operation, and :data:`COMPLETED`, an operation complete when started (a
one-rank call's copy)."""

from __future__ import annotations

import time
import weakref
from typing import TYPE_CHECKING, Any, Callable

import numpy as np
from mpi4py import MPI

from . import settings
from .runtime import abandoned
from .runtime.agreement import gather_rows
from .runtime.operation import Operation
from .runtime.progress import Guard, deadline_from, wait_requests
from .runtime.libmpi import DONE, MISMATCH, PENDING
from .runtime.scheduled import Runner

if TYPE_CHECKING:
    from .prepared import Prepared


class Request:
    """A started collective: ``test()`` makes progress without blocking, ``wait()`` completes;
    after completion both return at once (``wait()`` twice is harmless)."""

    def __init__(self, operation: Any):
        self._operation = operation

    def test(self) -> bool:
        return self._operation.test()

    def wait(self) -> None:
        self._operation.wait()


_plain = True       # no check mode, no fault injection: a runner's start may skip Python


def _note_settings(current: settings.Settings) -> None:
    global _plain
    _plain = not current.check and current.stall is None


settings.on_change(_note_settings)


class PersistentRequest(Request):
    """A collective planned once and run many times on the same buffers: ``start()`` then
    ``wait()`` (or ``test()``), again and again; ``free()`` ends its use.

    States as MPI's persistent requests: inactive (made, or completed) -> ``start()`` ->
    active -> ``wait()``/``test()`` True -> inactive.  ``start()`` or ``free()`` while active
    raise RuntimeError; ``wait()``/``test()`` while inactive return at once; after ``free()``
    only ``free()`` (harmless) and ``wait()``/``test()`` are allowed.

    Once a run has been on the compiled executor (:mod:`hpccoll.runtime.scheduled`, from the
    second start), ``start()`` and ``wait()`` call its function directly; anything but a
    clean completion goes to an :class:`~hpccoll.runtime.operation.Operation` (deadline,
    notices, failure) as on the first run.  The library's own collective is the library's
    persistent collective where it has one (MPI-4's ``MPI_<Collective>_init``, made here,
    started by ``MPI_Start``: :class:`NativePersistent`), else posted and polled by the
    compiled native executor where that runs the call (:class:`NativeStarted`, on a state
    of its own)."""

    def __init__(self, prepared: "Prepared", sendbuf: Any, recvbuf: Any):
        super().__init__(None)
        self._prepared, self._send, self._recv = prepared, sendbuf, recvbuf
        self._slot = prepared.ctx.next_slot()
        self._tag = prepared.tag(self._slot)
        self._freed = False
        # a start on the compiled executor: the run object posted again at every start
        # (:meth:`Started.post`, :meth:`NativeStarted.post`), once a run has been there
        self._started: Started | NativeStarted | None = None
        self._copy = None       # one rank, a scheduled algorithm: (recv, send) flat views
        if prepared.local_copy and sendbuf is not None:
            self._copy = (recvbuf.reshape(-1), sendbuf.reshape(-1))
        self._arrays = (sendbuf, sendbuf[:0] if prepared.ignores_recv else recvbuf)
        if prepared.plan is None and not prepared.moves_nothing:
            self._started = NativePersistent.of(prepared, sendbuf, recvbuf)
            if self._started is None and prepared.compiled is not None:
                self._started = NativeStarted(prepared.compiled.twin())

    @property
    def active(self) -> bool:
        return self._operation is not None and not self._operation.done

    def start(self) -> None:
        if self._freed:
            raise RuntimeError("persistent collective started after free()")
        if self.active:
            raise RuntimeError("persistent collective started again before it completed "
                               "(wait() or test() first)")
        prepared = self._prepared
        if _plain and prepared.ctx.revoked is None:
            started = self._started
            if started is not None:
                operation = started.post(*self._arrays)
                if operation is not None:
                    self._operation = operation
                    return
            elif prepared.local_copy:
                if self._copy is not None:
                    self._copy[0][...] = self._copy[1]
                self._operation = COMPLETED
                return
        self._operation = operation = prepared.start(self._send, self._recv, self._slot)
        if isinstance(operation, Operation) and not prepared.on_device:
            # scheduled, on the user's host arrays: later starts post on its binding
            runner = operation.runner
            if runner is not None:
                self._started = Started(runner, self._tag, prepared.reduce,
                                        (self._send, self._recv), prepared.ctx)
                self._arrays = (runner.send, runner.recv)

    def test(self) -> bool:
        return self._operation is None or self._operation.test()

    def wait(self) -> None:
        if self._operation is not None:
            self._operation.wait()

    def free(self) -> None:
        if self.active:
            raise RuntimeError("persistent collective freed while active (wait() first)")
        if not self._freed:
            self._freed = True
            if isinstance(self._started, NativePersistent):
                self._started.free()
            self._started = self._copy = None


class NativePersistent:
    """The MPI library's own persistent collective (MPI-4), made once for a persistent
    request's buffers (:meth:`of`): :meth:`post` starts it (``MPI_Start``) and returns a
    :class:`NativeOperation` on it, so that its test, wait, deadline and failures are those
    of every native call.  A persistent collective matches only the same persistent
    collective on the other ranks, so the ranks agree, when the request is made, to use it
    (every rank's buffers on the host); the MPI request is freed by :meth:`free`, or when
    this is collected, unless a failed run left it to :mod:`~.runtime.abandoned`."""

    __slots__ = ("held", "label", "memory", "guard", "__weakref__")

    def __init__(self, request: MPI.Prequest, label: str, memory: tuple, guard: Guard):
        self.held = _Held(request)
        self.label, self.memory, self.guard = label, memory, guard
        weakref.finalize(self, self.held.free)

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

    def post(self, send: Any, recv: Any) -> Any:
        """Start the collective (on its own buffers, which ``send``/``recv`` are; the
        persistent request starts it only when inactive): its operation, made at the first
        start and armed again at each.  Never None: a fall-back to another form of the
        collective would not match the other ranks' persistent one."""
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
    """A persistent MPI request and its last run: freed once, and only when inactive (a run
    that failed left it in flight, held by :mod:`~.runtime.abandoned`)."""

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


class Started:
    """Runs of a runner's function posted outside an operation (:meth:`post`; a
    persistent request posts the same object again at every start): ``wait()`` calls the
    function directly, and is done if the run completes cleanly; anything else (a
    ``test()``, a notice, a failure) continues the run in an
    :class:`~hpccoll.runtime.operation.Operation`, which completes it or raises as on any
    run.  ``memory``: the user's arrays, held meanwhile."""

    __slots__ = ("runner", "tag", "reduce", "memory", "guard", "operation", "finished")

    def __init__(self, runner: Runner, tag: int, reduce: Any, memory: tuple, guard: Guard):
        """Runs of ``runner`` tagged from ``tag``."""
        self.runner, self.tag, self.reduce, self.memory, self.guard = \
            runner, tag, reduce, memory, guard
        self.operation: Operation | None = None
        self.finished = True

    def post(self, send: Any, recv: Any) -> Any:
        """Run on ``send``/``recv`` (the runner's bound arrays, or like them) until the first
        step is posted: the run (this, an operation, or :data:`COMPLETED` if it has no
        message to wait for), or None (nothing sent) if the runner no longer serves its
        binding, is busy, or the arrays are not the ones it is bound to."""
        runner = self.runner
        binding = runner.binding
        if binding.runner is not runner or binding.busy:
            return None
        code = runner.function(send, recv, runner.state, runner.handles, 0, self.tag)
        if code == PENDING:
            self.operation, self.finished, binding.busy = None, False, True
            return self
        if code == DONE:
            return COMPLETED
        if code == MISMATCH:
            return None
        return Operation.resume(runner, code, self.reduce, self.memory, self.guard, self.tag)

    @property
    def done(self) -> bool:
        return self.finished if self.operation is None else self.operation.done

    def test(self) -> bool:
        if self.operation is None:
            if self.finished:
                return True
            self._continue(PENDING)
        return self.operation.test()

    def wait(self) -> None:
        if self.operation is None:
            if self.finished:
                return
            runner = self.runner
            code = runner.function(runner.send, runner.recv, runner.state, runner.handles,
                                   runner.polls, self.tag)
            if code == DONE:
                self.finished = True
                runner.binding.busy = False
                return
            self._continue(code)
        self.operation.wait()

    def _continue(self, code: int) -> None:
        """The run, where the function left it with ``code``, to an operation."""
        self.operation = Operation.resume(self.runner, code, self.reduce, self.memory,
                                          self.guard, self.tag)


class NativeStarted:
    """The library's own collective that a compiled :class:`~.runtime.native.NativeCall`
    posts (:meth:`post`; a persistent request posts the same object again at every start):
    ``wait()`` and ``test()`` poll it in compiled code; one not complete within the polls
    goes on under its deadline as every wait does (:meth:`~.runtime.native.NativeCall.finish`).
    The arrays are held until it completes."""

    __slots__ = ("call", "send", "recv", "done")

    def __init__(self, call: Any):
        self.call, self.send, self.recv, self.done = call, None, None, True

    def post(self, send: Any, recv: Any) -> Any:
        """Post the call on ``send`` (None: in place, or none) and ``recv``: the request
        (this, or :data:`COMPLETED`), or None (nothing sent) if the call is in flight
        already or the arrays are not as validated."""
        call = self.call
        if call.busy:
            return None
        code = call.start(recv if send is None else send, recv, call.state, call.handles, 0)
        if code == PENDING:
            self.send, self.recv, self.done, call.busy = send, recv, False, True
            return self
        if code == MISMATCH:
            return None
        call.finish(code, send, recv)       # (the start failed: raises)
        return COMPLETED

    def test(self) -> bool:
        if self.done:
            return True
        call = self.call
        code = call.test(call.state, call.handles, 1)
        if code == PENDING and not call.overdue():
            return False
        self._finish(code)
        return True

    def wait(self) -> None:
        if not self.done:
            call = self.call
            self._finish(call.test(call.state, call.handles, call.polls))

    def _finish(self, code: int) -> None:
        """Complete the call from where the compiled poll left it (``code``)."""
        self.done = True
        try:
            self.call.finish(code, self.send, self.recv)
        finally:
            self.call.busy = False
            self.send = self.recv = None


class _Done:
    """An operation complete when started: ``test()`` True, ``wait()`` returns at once."""

    done = True

    def test(self) -> bool:
        return True

    def wait(self) -> None:
        pass


COMPLETED = _Done()
