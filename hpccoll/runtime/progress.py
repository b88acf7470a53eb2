"""Waiting with a deadline: the one polling loop of the runtime.

Every wait of hpccoll -- a schedule step's requests, a node barrier through a shared segment,
an agreement between ranks -- polls with :func:`poll`: it yields the core after a number of
idle polls (:func:`note_ranks_per_host` sets how many) and gives up past the deadline
(``HPCCOLL_TIMEOUT`` seconds after the wait began unless given), whereupon the waiter raises
:class:`CollectiveTimeout` (:func:`timeout`) saying what did not complete and why, so no rank
hangs forever.  :func:`wait_requests` is that wait for a list of MPI requests.

The errors: :class:`CollectiveError` is what a collective that started but could not finish
raises -- :class:`CollectiveTimeout` (a deadline passed on this rank) or
:class:`CommunicatorRevoked` (the communicator's hpccoll state was revoked by an earlier
failure here or on another rank; see :mod:`hpccoll.context`); an error the MPI library
reports is raised as a CollectiveError too (:func:`mpi_failure`), its MPI error class in
``error_class``.  A wait that fails leaves its open requests to :mod:`.abandoned`.
"""

from __future__ import annotations

import os
import time
from functools import partial
from typing import Callable, Protocol

import numpy as np
from mpi4py import MPI

from .. import settings
from . import abandoned

POLLS_BEFORE_YIELD = {False: 256, True: 16}   # idle polls before yielding: cores to spare, or not
_idle_polls = POLLS_BEFORE_YIELD[False]


class CollectiveError(RuntimeError):
    """A collective began (messages may have been sent) and could not complete
    (``error_class``: the MPI error class where the MPI library reported the failure, the
    library's exception its ``__cause__``)."""

    error_class: int | None = None


class CollectiveTimeout(CollectiveError):
    """A collective step did not complete before the deadline (``peers``: the ranks whose
    messages did not come, where known)."""

    peers: tuple[int, ...] = ()


class CommunicatorRevoked(CollectiveError):
    """hpccoll's state of the communicator was revoked by an earlier failure (on this rank or
    another): every hpccoll call on it raises this until :func:`hpccoll.recover`."""


class Guard(Protocol):
    """What watches a communicator's waits (:class:`hpccoll.context.Context`)."""

    listening: MPI.Prequest     # the receive of a revocation notice (active until one came)
    noticed: np.ndarray         # [0]: 1 once it completed (compiled code sets it where it did)
    tag_span: int           # how many tags an operation's steps rotate through

    def interrupted(self) -> bool:
        """Whether another rank has revoked the communicator (cheap: polled while waiting)."""

    def notice(self) -> CommunicatorRevoked:
        """The error of the other rank's revocation that :meth:`interrupted` found."""

    def fail(self, error: BaseException) -> BaseException:
        """Revoke the communicator after ``error`` on this rank; the error to raise."""


# what an MPI error class means for a collective, where the library's own text says little
# (classes a library does not implement share MPI_ERR_UNKNOWN's value: those are left out)
_MEANINGS = {
    "ERR_TRUNCATE": "a message arrived longer than the receive posted for it: the ranks "
                    "passed counts that do not match",
    "ERR_IN_STATUS": "a transfer failed (MPI reports the cause per request; most often a "
                     "message longer than the receive posted for it: the ranks passed counts "
                     "that do not match)",
    "ERR_PROC_FAILED": "a peer process failed",
    "ERR_PROC_ABORTED": "a peer process aborted",
    "ERR_REVOKED": "the MPI library revoked the communicator",
}
_NAMES = {getattr(MPI, name): f"MPI_{name}" for name in sorted(dir(MPI), reverse=True)
          if name.startswith("ERR_") and name not in ("ERR_LASTCODE", "ERR_BASE") and
          (name == "ERR_UNKNOWN" or getattr(MPI, name) != MPI.ERR_UNKNOWN)}
_MEANINGS_BY_CLASS = {getattr(MPI, name): meaning for name, meaning in _MEANINGS.items()
                      if getattr(MPI, name) != MPI.ERR_UNKNOWN}
COUNTS_HINT = ("for alltoallv, a rank's recvcounts[j] smaller than rank j's sendcounts to it "
               "(HPCCOLL_CHECK=1 compares every rank's counts before any message and names "
               "the ranks and counts)")


def mpi_failure(error: BaseException) -> BaseException:
    """``error`` as hpccoll raises it: an exception of the MPI library becomes a
    :class:`CollectiveError` saying what the error class means (its ``error_class`` set, the
    library's exception its cause); any other error is returned as it is."""
    if not isinstance(error, MPI.Exception):
        return error
    code = error.Get_error_class()
    name = _NAMES.get(code, f"MPI error class {code}")
    try:
        text = error.Get_error_string()
    except MPI.Exception:
        text = ""
    meaning = _MEANINGS_BY_CLASS.get(code)
    if meaning is None:
        said = f"the MPI library reported {name}: {text}"
    else:
        hint = f"; {COUNTS_HINT}" if code in (MPI.ERR_TRUNCATE, MPI.ERR_IN_STATUS) else ""
        said = f"{meaning}{hint} ({name}: {text})"
    failure = CollectiveError(said)
    failure.error_class = code
    failure.__cause__ = error
    return failure


def note_ranks_per_host(ranks: int) -> None:
    """Poll longer before yielding when this host has a core per rank, yield early when ranks
    outnumber cores (a spinning rank then holds the core its peer needs: measured at 4 ranks
    on 2 cores, yielding after 16 polls instead of 256 makes small collectives 3x faster)."""
    global _idle_polls
    _idle_polls = POLLS_BEFORE_YIELD[ranks > (os.cpu_count() or 1)]


def idle_polls() -> int:
    """How many idle polls a wait makes before it yields the core."""
    return _idle_polls


def deadline_from(start: float) -> float | None:
    """The monotonic time at which work begun at ``start`` times out (None: never)."""
    limit = settings.current.timeout
    return None if limit is None else start + limit


def poll(done: Callable[[], bool], deadline: float | None,
         interrupted: Callable[[], bool] | None = None) -> bool:
    """Call ``done()`` until it returns True, yielding the core after a number of idle polls
    (:func:`note_ranks_per_host`); True when done, False once past ``deadline`` (None:
    never; read every 64 polls, and at every poll once yielding) or once ``interrupted()``
    (every 64 polls)."""
    spins = 0
    while not done():
        spins += 1
        yielding = spins > _idle_polls
        if yielding:
            os.sched_yield()
        # once yielding, the deadline at every poll: on a crowded host a yield can give the
        # core away for milliseconds, and 64 of them would pass a deadline by far
        every64 = spins % 64 == 0
        if (yielding or every64) and past(deadline):
            return False
        if every64 and interrupted is not None and interrupted():
            return False
    return True


def timeout(what: str, detail: str, peers: tuple[int, ...] = ()) -> CollectiveTimeout:
    """The error for ``what`` past its deadline, ``detail`` saying what was missing (its
    ``peers``: the ranks whose messages did not come, if known)."""
    error = CollectiveTimeout(f"{what} did not complete within {settings.current.timeout:g} s "
                              f"(HPCCOLL_TIMEOUT): {detail}")
    error.peers = peers
    return error


def wait_requests(requests: list[MPI.Request], what: str, deadline: float | None = None,
                  memory: tuple = (), guard: Guard | None = None) -> None:
    """Complete ``requests``, polling until ``deadline`` (default: ``HPCCOLL_TIMEOUT`` from
    now) or until ``guard`` is interrupted; then (or on any error meanwhile) leave them and
    the ``memory`` they use to :func:`abandoned.hold`, revoke the guard's communicator, and
    raise :class:`CollectiveTimeout` naming ``what`` (or the error, or the guard's)."""
    # (one request by its own Test: MPICH 5.0.2's MPI_Testall fails with MPI_ERR_IN_STATUS
    # on a persistent collective's request that MPI_Test completes)
    done = requests[0].Test if len(requests) == 1 else partial(MPI.Request.Testall, requests)
    if done():
        return
    if deadline is None:
        deadline = deadline_from(time.monotonic())
    error: BaseException | None = None       # None: interrupted by another rank's notice
    try:
        if poll(done, deadline, guard and guard.interrupted):
            return
        if past(deadline):
            error = timeout(what, f"{sum(r != MPI.REQUEST_NULL for r in requests)} request(s) "
                                  "open")
    except BaseException as exc:        # an MPI error, an interrupt
        error = exc
    abandoned.hold(what, requests, *memory)
    if guard is None:
        raise mpi_failure(error)
    raise guard.notice() if error is None else guard.fail(error)


def past(deadline: float | None) -> bool:
    return deadline is not None and time.monotonic() > deadline


class Completed:
    """An operation complete when started (a run of a compiled executor that finished within
    its polls, a one-rank call's copy, a call that moves nothing): ``test()`` True, ``wait()``
    returns at once."""

    __slots__ = ()
    done = True

    def test(self) -> bool:
        return True

    def wait(self) -> None:
        pass


COMPLETED = Completed()
