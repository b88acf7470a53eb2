"""The compiled executors' calls from C: the executors' :class:`Bound` functions, and the
entry of a repeated blocking call, the public functions' first step.

Every start, test and wait of a compiled executor calls its :class:`Bound`: its Numba C
functions (by address) bound to the executor's state, which checks the buffers as the
compiled checks did and runs (or, ``resume``, runs on), with no Numba dispatch in between
(~0.6 us for a call of four arrays).

A blocking call that repeats the collective's last validated call on a compiled executor
(:class:`hpccoll.api.LastCall`) needs no Python beyond the public function's frame: the
function calls its collective's :class:`Entry` first, which compares the arguments with the
armed call, checks the arrays (dtype, size, C layout, writability, no overlap, the bound
addresses of a scheduled binding), and runs the executor's :class:`Bound`; it returns False,
having done nothing, for any other call, which the Python path (``api.run_collective``) then
serves as before.  A run still in flight after the executor's polls is finished by the
armed ``finish`` callable, in Python, under the failure model (deadline, revocation notices,
the memory held after a failure).  So the entry changes how fast a repeat is served, never
what it does: it makes the checks the Python path makes (``api._again``,
``LastCall.repeat``, the executors' compiled checks), and declines what they would decline.

The non-blocking functions (``i<collective>``) and ``hpccoll.Comm``'s ``I...`` methods call
an :class:`Entry` armed for starts: a start of the last validated call on the compiled native
executor draws the context's next tag slot and returns the request, which completes the run
from C (:class:`Started`); a start that runs no executor (one rank's copy of the send
buffer -- none in place -- or a call that moves nothing) is made in C too, and its request
returned complete.

A persistent request on the compiled native executor is started and completed from C too:
:class:`Started`, the base of :class:`hpccoll.Request`, armed with the executor's run,
starts it (``MPI_Start`` in the compiled code) and completes it (``MPI_Testsome`` of its
request and the notice receive) with no Python frame while the run is clean; a run that is
not (still in flight after its polls, a notice, an error) is finished by the executor's
Python code as every run.  One that runs no executor (one rank's copy, a call that moves
nothing) is made at its start from C, the request active until waited or tested.

``_entry.c`` is built at install (setup.py) when a C compiler is there; without one, the
:class:`StandIn` takes the entry's place and serves no call, the executors call their
Numba functions from Python (:class:`Dispatched`), and requests are
:class:`StartedInPython`.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

# What an argument of an armed call must be in a repeat (a pattern item is (kind, value,
# buffer): buffer 0 the send buffer, 1 the receive one, -1 neither): the same object, an equal
# value of the same type, a NumPy array of the call's dtype, a spec -- a list or tuple of such
# an array then items equal to ``value``'s -- or anything (the numbering of ``_entry.c``)
SAME, EQUAL, ARRAY, SPEC, ANY = range(5)


class StandIn:
    """The entry where the C one was not built: it serves no call."""

    armed = False

    def __call__(self, *arguments: Any) -> bool:
        return False

    def arm(self, pattern: tuple, run: tuple, start: tuple | None = None) -> None:
        pass

    def disarm(self) -> None:
        pass


class Dispatched:
    """What an executor's :class:`Bound` is where the C one was not built: its Numba
    functions called from Python (Numba's dispatch checks the arrays' types, the functions
    the rest), as ``run(send, recv, polls, tag)`` and ``resume(polls, tag)``."""

    __slots__ = ("run", "resume")

    def __init__(self, run: Callable[..., int], resume: Callable[[int, int], int]):
        self.run, self.resume = run, resume

    def __call__(self, send: Any, recv: Any, polls: int, tag: int) -> int:
        return self.run(send, recv, polls, tag)


class StartedInPython:
    """What :class:`Started` is where the C entry was not built: a started collective whose
    ``_operation`` completes the run (None once complete; a ``wait()`` or ``test()`` that
    raises ends the run too), whose ``_run_start()`` is ``self._start()``; arming (and the
    C one's ``bound``, ``pending`` and ``polls``) does nothing."""

    __slots__ = ("_operation",)

    def __init__(self, operation: Any = None, *resumed: Any):
        self._operation = operation

    def _run_start(self) -> None:
        self._start()

    def test(self) -> bool:
        operation = self._operation
        if operation is None:
            return True
        try:
            done = operation.test()
        except BaseException:
            self._operation = None
            raise
        if done:
            self._operation = None
        return done

    def wait(self) -> None:
        operation = self._operation
        if operation is not None:
            try:
                operation.wait()
            finally:
                self._operation = None

    def _arm(self, *run: Any) -> None:
        pass

    def _disarm(self) -> None:
        pass


try:
    from ._entry import Bound, Entry, Started
    COMPILED = True
except ImportError:         # (installed without a C compiler: the Python path serves all)
    Bound, Entry, Started, COMPILED = None, StandIn, StartedInPython, False


def bind(functions: Callable[[], tuple[int, int]], state: Any, handles: Any, dtype: Any,
         send: tuple[int, int], recv: tuple[int, int],
         dispatched: Callable[[], Dispatched]) -> Any:
    """An executor's compiled functions bound to its ``state`` and ``handles`` for buffers
    of ``dtype``: the :class:`Bound` of the addresses ``functions()`` gives (run, resume;
    0: one rank's copy, no executor), each buffer (``send``, ``recv``) described as
    ``(elements, address)`` -- taken from the caller (elements >= 0; at its own address when
    the address is 0, else only there) or not (elements < 0: the address is passed); where
    the C entry was not built, ``dispatched()``."""
    from .libmpi import DONE, MISMATCH     # (imports mpi4py.MPI: not on importing this)
    if not COMPILED:
        return dispatched()
    run, resume = functions()
    return Bound(run, resume, state, handles, dtype, DONE, MISMATCH, send, recv)


def copy_bound(dtype: Any, send_n: int | None, recv_n: int | None) -> Any:
    """The :class:`Bound` of a run on no executor: one rank's copy of a send buffer of
    ``send_n`` elements of ``dtype`` into a receive one of ``recv_n`` (None: no such buffer,
    in place), or a call that moves nothing (sizes 0)."""
    sides = [(-1 if n is None else n, 0) for n in (send_n, recv_n)]
    return bind(lambda: (0, 0), _NO_STATE, _NO_STATE, dtype, *sides, lambda: None)


_NO_STATE = np.zeros(1, np.int64)       # (the state of a run on no executor)
