"""The compiled executors' calls from C (hpccoll.runtime.entry): built, numbered as the
Python side numbers its pattern kinds; a Bound checks the buffers as the compiled checks did
(here with no executor function: one rank's copy); the entry refuses malformed patterns and
declines every call when not armed.  (Serving real calls is tested under MPI:
tests/mpi/test_fastpath.py, tests/mpi/test_comm_fastpath.py.)"""

from __future__ import annotations

import numpy as np
import pytest

from hpccoll.runtime import entry
from hpccoll.runtime.libmpi import DONE, MISMATCH


def test_the_c_entry_is_built_and_numbered_as_python_numbers_it():
    from hpccoll.runtime import _entry
    assert entry.COMPILED and entry.Entry is _entry.Entry and entry.Bound is _entry.Bound
    assert (_entry.SAME, _entry.EQUAL, _entry.ARRAY, _entry.SPEC, _entry.ANY) == \
        (entry.SAME, entry.EQUAL, entry.ARRAY, entry.SPEC, entry.ANY)


def copying(send: tuple[int, int] = (4, 0), recv: tuple[int, int] = (4, 0)) -> entry.Bound:
    """A Bound with no executor function: one rank's call, which copies the send buffer."""
    state = np.zeros(4, np.int64)
    return entry.bind(lambda: (0, 0), state, state, np.dtype(np.float64), send, recv,
                      lambda: None)


def test_a_bound_copy_takes_only_buffers_as_bound():
    bound = copying()
    send, recv = np.arange(4.0), np.zeros(4)
    assert bound(send, recv, 0, 0) == DONE and np.array_equal(recv, send)
    assert bound.resume(5, 0) == DONE              # (no function: nothing to run on)
    backing = np.zeros(8)
    for wrong_send, wrong_recv in [
            (np.arange(4, dtype=np.float32), recv),      # another dtype
            (np.arange(5.0), recv),                      # another size
            (send, np.zeros(8)[::2]),                    # not C-contiguous
            (backing[:4], backing[2:6]),                 # overlapping
            (None, recv),                                # no send buffer where one is taken
            (list(send), recv),                          # not a NumPy array
    ]:
        recv[...] = backing[...] = -1
        assert bound(wrong_send, wrong_recv, 0, 0) == MISMATCH, (wrong_send, wrong_recv)
        assert (recv == -1).all() and (backing == -1).all()
    frozen = np.zeros(4)
    frozen.flags.writeable = False
    assert bound(send, frozen, 0, 0) == MISMATCH and (frozen == 0).all()   # read-only recv
    fixed = copying(recv=(4, recv.ctypes.data))      # the receive buffer at one address only
    assert fixed(send, np.zeros(4), 0, 0) == MISMATCH
    recv[...] = 0
    assert fixed(send, None, 0, 0) == DONE          # none given: the bound one, not copied
    assert fixed(send, recv, 0, 0) == DONE and np.array_equal(recv, send)
    assert copying(send=(-1, 0))(None, recv, 0, 0) == DONE      # no send buffer taken
    with pytest.raises(TypeError):
        bound(send, recv, 0)
    with pytest.raises(TypeError):
        entry.Entry().arm((), ({}, object(), object(), object(), print, 1, 0))   # no Bound


def run_tuple() -> tuple:
    """What arm takes after the pattern (nothing is armed by the malformed patterns here)."""
    return ({}, object(), object(), copying(), print, 1, 0)


@pytest.mark.parametrize("pattern, error", [
    (((9, None, -1),), ValueError),                     # no such kind
    (((entry.ARRAY, None, 2),), ValueError),            # an array of no buffer
    (((entry.SPEC, 5, 1),), ValueError),                # a spec's rest not a list or tuple
    (tuple((entry.ANY, None, -1) for _ in range(9)), ValueError),   # more than 8 arguments
    (((entry.SAME, None),), TypeError),                 # not (kind, value, buffer)
])
def test_malformed_patterns_are_refused_and_nothing_armed(pattern, error):
    armed = entry.Entry()
    with pytest.raises(error):
        armed.arm(pattern, run_tuple())
    assert not armed.armed
    assert armed(1, 2, 3) is False


def test_an_entry_not_armed_declines_every_call_and_a_stand_in_too():
    for made in (entry.Entry(), entry.StandIn()):
        assert not made.armed
        assert made(None, np.zeros(3), np.zeros(3), None, None, 0, "auto", None) is False
        made.disarm()
        assert made() is False


class _Run:
    """An operation whose ``test()`` is False ``pending`` times, then True (or raises)."""

    def __init__(self, pending: int = 0, fails: bool = False):
        self.pending, self.fails, self.waited = pending, fails, 0

    def test(self) -> bool:
        if self.fails:
            raise RuntimeError("failed run")
        self.pending -= 1
        return self.pending < 0

    def wait(self) -> None:
        self.waited += 1
        if self.fails:
            raise RuntimeError("failed run")


@pytest.mark.parametrize("base", [entry.Started, entry.StartedInPython],
                         ids=["C", "Python"])
def test_a_started_collective_completes_its_operation_in_c_as_in_python(base):
    """Unarmed, the C base of hpccoll.Request does what its Python stand-in does: test()
    polls the operation until True, wait() waits once, both return at once afterwards; a
    test() or wait() that raises ends the run; _run_start() (a persistent request's start())
    is the subclass's _start(); a bound that is not a Bound resumes nothing."""
    class Request(base):
        __slots__ = ("starts",)

        def _start(self):
            self.starts += 1
            self._operation = _Run(pending=2)

    request = Request(_Run(pending=1))
    request.starts = 0
    assert request.test() is False and request._operation is not None
    assert request.test() is True and request._operation is None
    assert request.test() is True
    request._run_start()
    assert request.starts == 1
    run = request._operation
    request.wait()
    request.wait()
    assert run.waited == 1 and request._operation is None
    for call in (request.test, request.wait):
        request._operation = _Run(fails=True)
        with pytest.raises(RuntimeError, match="failed run"):
            call()
        assert request._operation is None
    assert Request()._operation is None
    resumed = Request(_Run(pending=0), object(), 1, 5)     # (not a Bound: Python's)
    resumed.starts = 0
    assert resumed.test() is True and resumed._operation is None


def test_only_a_bound_arms_a_started_collective():
    with pytest.raises(TypeError):
        entry.Started()._arm(object(), None, (None, None), None, None, 1, 0, 0)
    with pytest.raises(ValueError, match="memory is"):
        entry.Started()._arm(copying(), None, (None,), None, None, 1, 0, 0)
