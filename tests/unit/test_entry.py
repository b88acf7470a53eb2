"""The C entry of repeated blocking calls (hpccoll.runtime.entry): built, numbered as the
Python side numbers its pattern kinds, refusing malformed patterns, declining every call
when not armed.  (Its serving of real calls is tested under MPI: tests/mpi/test_fastpath.py,
tests/mpi/test_comm_fastpath.py.)"""

from __future__ import annotations

import numpy as np
import pytest

from hpccoll.runtime import entry


def test_the_c_entry_is_built_and_numbered_as_python_numbers_it():
    from hpccoll.runtime import _entry
    assert entry.COMPILED and entry.Entry is _entry.Entry
    assert (_entry.SAME, _entry.EQUAL, _entry.ARRAY, _entry.SPEC, _entry.ANY) == \
        (entry.SAME, entry.EQUAL, entry.ARRAY, entry.SPEC, entry.ANY)


def run_tuple(state: np.ndarray, handles: np.ndarray) -> tuple:
    """What arm takes after the pattern and dtype (an address no call reaches: nothing is
    armed by the malformed patterns here)."""
    return ({}, object(), object(), state, handles, print, 0, state.ctypes.data, state.size,
            handles.ctypes.data, handles.size, 1, 0, 0, 3, (-1, 0), (4, 0))


@pytest.mark.parametrize("pattern, error", [
    (((9, None, -1),), ValueError),                     # no such kind
    (((entry.ARRAY, None, 2),), ValueError),            # an array of no buffer
    (((entry.SPEC, 5, 1),), ValueError),                # a spec's rest not a list or tuple
    (tuple((entry.ANY, None, -1) for _ in range(9)), ValueError),   # more than 8 arguments
    (((entry.SAME, None),), TypeError),                 # not (kind, value, buffer)
])
def test_malformed_patterns_are_refused_and_nothing_armed(pattern, error):
    armed = entry.Entry()
    state, handles = np.zeros(4, np.int64), np.zeros(4, np.int64)
    with pytest.raises(error):
        armed.arm(pattern, np.dtype(np.float64), run_tuple(state, handles))
    assert not armed.armed
    assert armed(1, 2, 3) is False


def test_an_entry_not_armed_declines_every_call_and_a_stand_in_too():
    for made in (entry.Entry(), entry.StandIn()):
        assert not made.armed
        assert made(None, np.zeros(3), np.zeros(3), None, None, 0, "auto", None) is False
        made.disarm()
        assert made() is False
