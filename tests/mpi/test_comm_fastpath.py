"""``hpccoll.Comm``'s repeat path: the same call again is not read nor validated anew.

A method's last call on NumPy arrays is kept as a Reading (hpccoll.readings): the same
call again -- new spec lists holding the same buffers and numbers, every spec form -- must
skip reading the spec (and, blocking, validation: the validated call runs again at once),
while a call that differs in what reading depends on (count, datatype, displacements,
counts changed in place, a buffer of another shape or dtype) must be read anew; a call
that went to MPI's own collective goes there again unread while its arguments stay alike.  Every
result is compared with the wrapped communicator's own collective on the same arguments.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from test_mpi_comm import FORMS, SENTINEL, Records, buffer_specs, run, written


def again(arguments: tuple) -> tuple:
    """The same call's arguments in new spec lists (the same buffers and numbers)."""
    return tuple(type(a)(a) if isinstance(a, (list, tuple)) else a for a in arguments)


def numpy_only(method: str, arguments: tuple) -> bool:
    """Whether the call's buffers (its first two arguments, Bcast's first) are NumPy arrays,
    MPI.IN_PLACE or None, bare or in a spec."""
    from mpi4py import MPI
    buffers = [a[0] if isinstance(a, (list, tuple)) else a
               for a in arguments[:1 if method == "Bcast" else 2]]
    return all(b is None or b is MPI.IN_PLACE or type(b) is np.ndarray for b in buffers)


class Reads:
    """Counts the calls a Comm reads from scratch (its ``_read``) and validates
    (``api.prepare``) while in a ``with`` block."""

    def __init__(self, wrapped, monkeypatch):
        from hpccoll import api
        self.read = self.prepared = 0
        read, prepare = wrapped._read, api.prepare

        def counting_read(*args):
            self.read += 1
            return read(*args)

        def counting_prepare(*args, **kwargs):
            self.prepared += 1
            return prepare(*args, **kwargs)
        monkeypatch.setattr(wrapped, "_read", counting_read)
        monkeypatch.setattr(api, "prepare", counting_prepare)

    def reset(self) -> None:
        self.read = self.prepared = 0


def reset(method: str, arguments: tuple, fresh: tuple) -> None:
    """Put the receive buffer back as it was made (sentinels, or its input in place)."""
    at = 0 if method == "Bcast" else 1
    for target, source in ((arguments[at], fresh[at]),) + \
            (((arguments[0], fresh[0]),) if method != "Bcast" else ()):
        buf = target[0] if isinstance(target, (list, tuple)) else target
        original = source[0] if isinstance(source, (list, tuple)) else source
        if isinstance(buf, np.ndarray) and buf.flags.writeable:
            buf[...] = original


@pytest.mark.mpi(ranks=[1, 2, 3], timeout=300)
def test_the_same_call_again_skips_reading_and_validation(mpi_ranks, comm, monkeypatch):
    """Every spec form on NumPy arrays, in the three forms, with ``auto`` and a scheduled
    algorithm: the second call with new spec lists is neither read nor (blocking and
    non-blocking) validated, a call handed to MPI's own collective is logged once, and both
    results equal MPI's own collective's."""
    import hpccoll
    from hpccoll.collectives import nonblocking
    from hpccoll.readings import NativeReading, Reading
    from mpi4py import MPI
    for algorithms in (None, {"allreduce": "ring", "allgather": "ring", "bcast": "binomial",
                              "reduce": "binomial", "alltoall": "pairwise",
                              "reduce_scatter": "ring", "alltoallv": "direct"}):
        if algorithms and comm.size == 1:
            algorithms = None
        wrapped = hpccoll.Comm(comm, algorithms)
        reads = Reads(wrapped, monkeypatch)
        for form in FORMS:
            for method, label, make in buffer_specs(comm):
                arguments, pristine = make(), make()
                expect = make()
                getattr(MPI.Intracomm, method)(comm, *expect)
                for turn in range(3):
                    reads.reset()
                    with Records() as log:
                        run(wrapped, method, arguments if turn == 0 else again(arguments),
                            form)
                    assert written(method, arguments) == written(method, expect), \
                        (method, label, form, turn)
                    name = method if form == "blocking" else nonblocking(method) \
                        if form == "nonblocking" else method + "_init"
                    if not turn:        # (a gather of counts, a copy, other buffers: read)
                        native = bool(log.messages)
                        repeatable = numpy_only(method, arguments) and "gathered" not in label and \
                            not ("read-only" in label and comm.rank == 0)
                        kind = NativeReading if native else Reading
                        assert isinstance(wrapped._readings.get(name), kind) == repeatable, \
                            (method, label, form)
                    else:
                        assert (reads.read == 0) == repeatable, (method, label, form, reads.read)
                        # a hand-over is logged when it is decided, not when repeated
                        assert bool(log.messages) == (native and not repeatable), \
                            (method, label, form)
                        if form != "persistent" and repeatable and not native:
                            assert reads.prepared == 0, (method, label, form)
                    reset(method, arguments, pristine)


@pytest.mark.mpi(ranks=[2, 3], timeout=300)
def test_a_call_that_differs_is_read_again(mpi_ranks, comm, monkeypatch):
    """What reading depends on changed between calls -- count, datatype, displacement,
    counts mutated in place, the buffer's shape or dtype, the op, the root -- is read anew
    and gives MPI's result; another array of the same dtype and shape is the same call.  A
    call that went to MPI's own collective goes there again without reading while the
    arguments stay alike."""
    import hpccoll
    from mpi4py import MPI
    p, r = comm.size, comm.rank
    wrapped = hpccoll.Comm(comm)
    reads = Reads(wrapped, monkeypatch)
    x = np.arange(12, dtype=np.float64) + 100 * r
    y = np.full(12, SENTINEL, np.float64)

    def check(method, *arguments, read):
        """``method`` on ``arguments`` through the Comm, read ``read`` times, gives what
        MPI's own collective gives on a copy of the written buffer."""
        at = 0 if method == "Bcast" else 1
        spec = arguments[at]
        target = spec[0] if isinstance(spec, list) else spec
        copy = target.copy() if method == "Bcast" else np.full_like(target, SENTINEL)
        expect = list(arguments)
        expect[at] = [copy, *spec[1:]] if isinstance(spec, list) else copy
        getattr(MPI.Intracomm, method)(comm, *expect)
        if method != "Bcast":
            target[...] = SENTINEL
        reads.reset()
        getattr(wrapped, method)(*arguments)
        assert reads.read == read, (method, arguments[1:], reads.read)
        assert np.array_equal(target, copy), (method, target, copy)

    check("Allreduce", [x, 4, MPI.DOUBLE], [y, 4, MPI.DOUBLE], read=1)
    check("Allreduce", [x, 4, MPI.DOUBLE], [y, 4, MPI.DOUBLE], read=0)     # the same call
    check("Allreduce", [x, 5, MPI.DOUBLE], [y, 5, MPI.DOUBLE], read=1)     # count
    check("Allreduce", [x, (5, 2), MPI.DOUBLE], [y, (5, 2), MPI.DOUBLE], read=1)   # displ
    check("Allreduce", [x, (5, 2), MPI.DOUBLE], [y, (5, 2), MPI.DOUBLE], read=0)
    check("Allreduce", [x, (5, 2), MPI.DOUBLE], [y, (5, 2), MPI.DOUBLE], MPI.MAX, read=1)
    check("Allreduce", [x, 6, MPI.INT64_T], [y, 6, MPI.INT64_T], read=1)  # type, same memory
    other = np.arange(12, dtype=np.float64) * (r + 2)
    check("Allreduce", [other, 6, MPI.INT64_T], [y, 6, MPI.INT64_T], read=0)   # like x
    check("Allreduce", [other.reshape(3, 4), 6, MPI.INT64_T], [y, 6, MPI.INT64_T], read=1)
    check("Allreduce", [other.astype(np.float32), 6, MPI.INT32_T],
          [y.view(np.float32), 6, MPI.INT32_T], read=1)                     # dtype
    counts = [1 + i % 2 for i in range(p)]
    mine = np.arange(counts[r], dtype=np.float64) + r
    out = np.full(2 * p + 1, SENTINEL, np.float64)
    check("Allgatherv", mine, [out, counts], read=1)
    check("Allgatherv", mine, [out, list(counts)], read=0)
    counts[r] += 0          # (equal values in a new list: the same call)
    check("Allgatherv", mine, [out, (counts, [sum(counts[:i]) for i in range(p)])], read=1)
    check("Allgatherv", mine, [out, (counts, [sum(counts[:i]) for i in range(p)])], read=0)
    counts[:] = [2] * p     # mutated in place: another call
    mine = np.arange(2, dtype=np.float64) + r
    check("Allgatherv", mine, [out, (counts, [2 * i for i in range(p)])], read=1)
    check("Allgatherv", mine, [out, np.array(counts)], read=1)     # counts in an array
    check("Allgatherv", mine, [out, np.array(counts)], read=0)     # equal numbers again
    check("Allgatherv", mine[:1], [out, np.ones(p, int)], read=1)  # other numbers
    for k in range(3):      # MPI's own call (IN_PLACE alltoall): read once, then alike
        mine = np.arange(2 * p, dtype=np.float64) + 10 * r + k
        theirs = mine.copy()
        reads.reset()
        wrapped.Alltoall(MPI.IN_PLACE, mine)
        assert reads.read == (k == 0), (k, reads.read)
        comm.Alltoall(MPI.IN_PLACE, theirs)
        assert np.array_equal(mine, theirs)
    check("Alltoall", x[:2 * p], y[:2 * p], read=1)     # not in place: hpccoll's again
    check("Alltoall", x[:2 * p], y[:2 * p], read=0)
    check("Alltoall", x[:4 * p], y[:4 * p], read=1)     # other shapes
    check("Alltoall", x[:4 * p].astype(np.float32), y.view(np.float32)[:4 * p], read=1)
    largest = MPI.Op.Create(lambda a, b, datatype: np.maximum(
        np.frombuffer(a, np.float64), np.frombuffer(b, np.float64), out=np.frombuffer(
            b, np.float64)), commute=True)
    try:
        check("Allreduce", x, y, largest, read=1)       # a user's op: MPI's own call
        check("Allreduce", x, y, largest, read=0)
        check("Allreduce", x[:6], y[:6], largest, read=1)   # other shapes: read again
        check("Allreduce", x[:6], y[:6], largest, read=0)
        frozen = x[:6].copy()
        frozen.flags.writeable = False
        check("Allreduce", frozen, y[:6], largest, read=1)   # other flags: read again
        check("Allreduce", frozen, y[:6], largest, read=0)
        check("Allreduce", x[:6].astype(np.float32), y.view(np.float32)[:6], largest,
              read=1)                                       # other dtypes
        check("Allreduce", x, y, MPI.MAX, read=1)
        check("Allreduce", [x, 4, MPI.DOUBLE], [y, 4, MPI.DOUBLE], largest, read=1)  # specs
        check("Allreduce", [x, 4, MPI.DOUBLE], [y, 4, MPI.DOUBLE], largest, read=0)
        check("Allreduce", [x, 5, MPI.DOUBLE], [y, 5, MPI.DOUBLE], largest, read=1)  # count
        check("Allreduce", [x.reshape(3, 4), 5, MPI.DOUBLE], [y, 5, MPI.DOUBLE], largest,
              read=1)                                                   # the buffer's shape
        check("Allreduce", (x, 5, MPI.DOUBLE), [y, 5, MPI.DOUBLE], largest, read=1)  # tuple
        check("Allreduce", [x, 5, MPI.INT64_T], [y, 5, MPI.INT64_T], largest, read=1)
    finally:
        largest.Free()
    z = np.arange(6, dtype=np.float32) + r
    check("Bcast", z, 0, read=1)
    check("Bcast", z, 0, read=0)
    check("Bcast", z, p - 1, read=1)                                        # root
    check("Bcast", z[:3], p - 1, read=1)                                    # shape
    check("Bcast", z[:3].astype(np.int32), p - 1, read=1)                   # dtype
    check("Bcast", z[:3].astype(np.int32), p - 1, read=0)
    check("Bcast", [z, 0, MPI.BYTE], 0, read=1)     # no element (OSU's 0 bytes): read once
    check("Bcast", [z, 0, MPI.BYTE], 0, read=0)
    check("Bcast", [z, 4, MPI.BYTE], 0, read=1)
    check("Allreduce", [x, (0, 3), MPI.DOUBLE], [y, (0, 5), MPI.DOUBLE], read=1)
    check("Allreduce", [x, (0, 3), MPI.DOUBLE], [y, (0, 5), MPI.DOUBLE], read=0)
    check("Allreduce", [x, (1, 3), MPI.DOUBLE], [y, (1, 5), MPI.DOUBLE], read=1)
    w = np.arange(8, dtype=np.float64) + r      # the same buffer object in a new spec list
    check("Bcast", [w, 4, MPI.DOUBLE], 0, read=1)
    check("Bcast", [w, 4, MPI.DOUBLE], 0, read=0)
    w.shape = (2, 4)                                                        # changed in place
    check("Bcast", [w, 4, MPI.DOUBLE], 0, read=1)
    check("Bcast", [w, 4, MPI.DOUBLE], 0, read=0)
    v, u = x.copy(), np.full(12, SENTINEL)
    check("Allreduce", [v, 4, MPI.DOUBLE], [u, 4, MPI.DOUBLE], read=1)
    check("Allreduce", [v, 4, MPI.DOUBLE], [u, 4, MPI.DOUBLE], read=0)
    v.flags.writeable = False               # a read-only send buffer: the same call
    check("Allreduce", [v, 4, MPI.DOUBLE], [u, 4, MPI.DOUBLE], read=0)
    u[...] = SENTINEL
    u.flags.writeable = False               # a read-only receive buffer: refused, not written
    with pytest.raises(BufferError):
        wrapped.Allreduce([v, 4, MPI.DOUBLE], [u, 4, MPI.DOUBLE])
    assert (u == SENTINEL).all()


@pytest.mark.mpi(ranks=[2, 3], timeout=300)
def test_blocking_repeats_through_the_c_entry(mpi_ranks, comm, monkeypatch):
    """Blocking calls on the very arrays reading gave -- arrays as passed, IN_PLACE, specs
    ``[buf, counts]`` and ``[buf, (counts, displs), type]``, a reduce whose other ranks pass no
    receive buffer -- are served by the method's C entry from their third call (native, and
    a scheduled algorithm, whose binding runs compiled from its second repeat): the Python
    repeat (``LastCall.repeat``) is not reached, and every result is MPI's own.  A new spec
    of another form, another op, a wider array go through Python and are right."""
    import hpccoll
    from hpccoll import api
    from hpccoll.runtime import libmpi
    from mpi4py import MPI
    p, r = comm.size, comm.rank
    repeats = []
    repeat = api.LastCall.repeat
    monkeypatch.setattr(api.LastCall, "repeat", lambda *a: repeats.append(1) or repeat(*a))
    validated, prepare = [], api.prepare
    monkeypatch.setattr(api, "prepare", lambda *a, **k: validated.append(1) or prepare(*a, **k))
    counts, displs = [1 + q % 2 for q in range(p)], [3 * q for q in range(p)]
    for algorithms in ({}, {"allreduce": "ring", "allgather": "ring", "alltoallv": "pairwise",
                            "reduce": "binomial", "bcast": "binomial"}):
        wrapped = hpccoll.Comm(comm, algorithms)
        x = np.arange(12.0) + 100 * r
        y, z, out, b = np.zeros(12), np.zeros(12), np.zeros(sum(counts)), np.zeros(3 * p)
        a = np.arange(3.0 * p) + 10 * r
        mine = np.arange(float(counts[r])) + r
        got = np.zeros(12) if r == 0 else None
        cases = {
            "Allreduce": ((x, y), y),
            "Allreduce in place": ((MPI.IN_PLACE, z), z),
            "Allgatherv": ((mine, [out, counts]), out),
            "Alltoallv": (([a, (counts, displs), MPI.DOUBLE],
                           [b, ([counts[r]] * p, displs), MPI.DOUBLE]), b),
            "Reduce": ((x, got, MPI.SUM, 0), got),
            "Bcast": ((y, 0), y),
        }
        for label, (arguments, target) in cases.items():
            method = label.split()[0]
            for k in range(4):
                if label.endswith("in place"):
                    z[:] = x
                want = None if target is None else target.copy()    # MPI's own, on copies
                expect = [want if value is target else
                          [want, *value[1:]] if isinstance(value, list) and value[0] is target
                          else value for value in arguments]
                getattr(comm, method)(*expect)
                repeats.clear()
                getattr(wrapped, method)(*arguments)
                assert target is None or np.array_equal(target, want), (label, k, target, want)
                if k >= 2 and libmpi.available():
                    assert not repeats, (label, algorithms, k)
        starts = [sum(counts[:q]) for q in range(p)]
        for change in (lambda: wrapped.Allgatherv(mine, [out, (counts, starts)]),
                       lambda: wrapped.Allreduce(x, y, MPI.MAX),
                       lambda: wrapped.Allreduce(np.tile(x, 2), np.zeros(24))):
            wrapped.Allreduce(x, y)
            validated.clear()
            change()
            assert validated
        wrapped.Allreduce(x, y, MPI.MAX)
        assert np.array_equal(y, np.arange(12.0) + 100 * (p - 1))


@pytest.mark.mpi(ranks=[1, 2, 3], timeout=300)
def test_repeats_after_free_and_settings_changes(mpi_ranks, comm):
    """A freed Comm raises as mpi4py's freed communicator does; a repeat after check mode is
    switched on is validated and agreed (check mode's error for ranks that disagree)."""
    import hpccoll
    from mpi4py import MPI
    dup = comm.Dup()
    wrapped = hpccoll.Comm(dup)
    x, y = np.ones(4), np.zeros(4)
    for _ in range(2):
        wrapped.Allreduce(x, y)
        assert (y == comm.size).all()
    hpccoll.configure(check=True)
    try:
        bad = np.ones(4 if comm.rank else 5)
        if comm.size > 1:
            with pytest.raises(ValueError, match="HPCCOLL_CHECK"):
                wrapped.Allreduce(bad, np.zeros_like(bad))
        wrapped.Allreduce(x, y)
        assert (y == comm.size).all()
    finally:
        hpccoll.configure(check=False)
    wrapped.Free()
    assert wrapped == MPI.COMM_NULL
    with pytest.raises((TypeError, MPI.Exception)):
        wrapped.Allreduce(x, y)


CUDA_INTERFACE_WITHOUT_A_DRIVER = """
import numpy as np
from mpi4py import MPI
import hpccoll

class Interface:        # what a CuPy array looks like, over host memory
    def __init__(self, array):
        self.array = array
        self.__cuda_array_interface__ = {"shape": array.shape, "typestr": array.dtype.str,
                                         "strides": None, "version": 3,
                                         "data": (array.ctypes.data, False)}

comm = MPI.COMM_WORLD
wrapped = hpccoll.Comm(comm)
x = np.arange(1000.0) + comm.rank
for _ in range(2):
    got, want = np.zeros(1000), np.zeros(1000)
    wrapped.Allreduce(Interface(x), Interface(got))
    comm.Allreduce(x, want)
    assert np.array_equal(got, want), (got, want)
for rank in comm.gather(comm.rank) or ():     # (one process prints: lines stay whole)
    print("same as mpi4py", rank)
"""


def test_cuda_array_interface_without_a_driver_is_host_memory(tmp_path):
    """An object exposing ``__cuda_array_interface__`` where no CUDA driver is (no GPU, no
    simulator): mpi4py hands its pointer to MPI, and so does hpccoll.Comm (MPI's own
    collective), with mpi4py's result -- not a CUDA error."""
    script = tmp_path / "interface.py"
    script.write_text(textwrap.dedent(CUDA_INTERFACE_WITHOUT_A_DRIVER))
    env = {**os.environ, "NUMBA_ENABLE_CUDASIM": "0", "CUDA_VISIBLE_DEVICES": ""}
    mpiexec = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    done = subprocess.run([mpiexec, "-n", "2", sys.executable, str(script)], env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert sorted(done.stdout.split("\n")[:2]) == ["same as mpi4py 0", "same as mpi4py 1"]
