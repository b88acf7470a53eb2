"""The fast path of repeated blocking calls and the compiled executor of native calls.

A repeat of a collective's last blocking call skips validation (hpccoll.api.LastCall) and,
where the algorithm is native, runs on the compiled executor (hpccoll.runtime.native).  Each
case here changes something between repeats -- the data, the arrays, their memory (freed and
reallocated, resized in place), dtype, op, algorithm, IN_PLACE -- and checks the result
against NumPy on every rank's inputs; bad buffers on a repeat raise as on a first call; and
the failure model holds on the compiled executor: deadline, revocation, held memory.
"""

from __future__ import annotations

import gc
import time
from collections import defaultdict
import weakref

import numpy as np
import pytest

COLLECTIVES = ("allreduce", "allgather", "alltoall", "reduce_scatter")


def inputs(p: int, n: int, dtype: str, seed: int) -> list[np.ndarray]:
    """Every rank's send buffer (small integers: every reduction order is exact)."""
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 5, n).astype(dtype) for _ in range(p)]


def expected(collective: str, xs: list[np.ndarray], rank: int, op: str) -> np.ndarray:
    """The result NumPy computes from every rank's input."""
    p = len(xs)
    if collective == "allgather":
        return np.concatenate(xs)
    if collective == "alltoall":
        n = xs[0].size // p
        return np.concatenate([x[rank * n:(rank + 1) * n] for x in xs])
    total = np.max(xs, axis=0) if op == "max" else np.sum(xs, axis=0, dtype=xs[0].dtype)
    if collective == "reduce_scatter":
        n = xs[0].size // p
        return total[rank * n:(rank + 1) * n]
    return total


def send_size(collective: str, p: int, n: int) -> int:
    return n if collective in ("allreduce", "allgather") else n * p


def recv_size(collective: str, p: int, n: int) -> int:
    return {"allreduce": n, "allgather": n * p, "alltoall": n * p, "reduce_scatter": n}[
        collective]


def call(hpccoll, comm, collective, send, recv, op, algorithm):
    from mpi4py import MPI
    if collective in ("allreduce", "reduce_scatter"):
        getattr(hpccoll, collective)(comm, send, recv, op=getattr(MPI, op.upper()),
                                     algorithm=algorithm)
    else:
        getattr(hpccoll, collective)(comm, send, recv, algorithm=algorithm)


def scheduled(collective: str, p: int) -> str:
    """A scheduled algorithm that applies at ``p`` ranks."""
    from hpccoll import registry
    from hpccoll.collectives import uniform_call
    plain = uniform_call(collective, p, 0, 1)
    return next(a.name for a in registry.algorithms(collective) if a.name != "csc" and
                a.violated(plain) is None)


@pytest.mark.mpi(ranks=[1, 2, 3], timeout=300)
def test_repeats_give_right_results_whatever_changes(mpi_ranks, comm):
    """For each collective and algorithm (native, auto, a scheduled one): repeats on the same
    arrays with new data, on new arrays, on a freed and reallocated array, on arrays resized
    in place (native: larger, then back to the old size at another address), with the dtype
    changed in place, another op, and alternating algorithms -- each result equal to
    NumPy's."""
    import hpccoll
    from hpccoll import api
    from hpccoll.runtime import libmpi
    p, r = comm.size, comm.rank
    seed = iter(range(10_000))

    def check(collective, send, recv, n, dtype, op, algorithm):
        xs = inputs(p, send_size(collective, p, n), dtype, next(seed))
        send[...] = xs[r]
        recv[...] = 99
        call(hpccoll, comm, collective, send, recv, op, algorithm)
        want = expected(collective, xs, r, op)
        assert recv.dtype == want.dtype and np.array_equal(recv, want), \
            (collective, algorithm, dtype, op, n, recv, want)

    for collective in COLLECTIVES:
        ops = ("sum", "max") if collective in ("allreduce", "reduce_scatter") else ("sum",)
        for algorithm in ("native", "auto", scheduled(collective, p)):
            n = 3
            send = np.empty(send_size(collective, p, n), np.float32)
            recv = np.empty(recv_size(collective, p, n), np.float32)
            for op in ops:
                for _ in range(3):                              # the same arrays, new data
                    check(collective, send, recv, n, "float32", op, algorithm)
            if algorithm == "native" and libmpi.available():
                assert api._last_calls[collective].prepared.compiled is not None
            for _ in range(2):                                  # new arrays every call
                send = np.empty_like(send)
                recv = np.empty_like(recv)
                check(collective, send, recv, n, "float32", "sum", algorithm)
            del recv                                            # freed, then reallocated
            gc.collect()
            recv = np.empty(recv_size(collective, p, n), np.float32)
            check(collective, send, recv, n, "float32", "sum", algorithm)
            for m in (5, n) if algorithm == "native" else ():   # resized in place (NumPy
                send.resize(send_size(collective, p, m), refcheck=False)  # refuses while a
                recv.resize(recv_size(collective, p, m), refcheck=False)  # plan binds them)
                check(collective, send, recv, m, "float32", "sum", algorithm)
            send.dtype, recv.dtype = np.int32, np.int32         # same memory, another dtype
            check(collective, send, recv, n, "int32", "sum", algorithm)
            send.dtype, recv.dtype = np.float32, np.float32
            check(collective, send, recv, n, "float32", "sum", algorithm)
        other = scheduled(collective, p)
        send = np.empty(send_size(collective, p, 4), np.float64)
        recv = np.empty(recv_size(collective, p, 4), np.float64)
        for algorithm in ("native", other, "auto", other, "native", "native"):
            check(collective, send, recv, 4, "float64", "sum", algorithm)
        for dtype in ("float16", "complex64", "uint8", "int16"):   # float16: through mpi4py
            send = np.empty(send_size(collective, p, 2), dtype)
            recv = np.empty(recv_size(collective, p, 2), dtype)
            for _ in range(2):
                check(collective, send, recv, 2, dtype, "sum", "native")


@pytest.mark.mpi(ranks=[1, 2, 3], timeout=300)
def test_in_place_repeats(mpi_ranks, comm):
    """allreduce and allgather with MPI.IN_PLACE, repeated and alternating with calls that
    are not in place on the same arrays: each result equal to NumPy's."""
    import hpccoll
    from mpi4py import MPI
    p, r = comm.size, comm.rank
    for algorithm in ("native", "auto", "ring"):
        n = 5
        buf = np.empty(n, np.int64)
        gathered = np.empty(n * p, np.int64)
        other = np.empty(n, np.int64)
        for k in range(6):
            xs = inputs(p, n, "int64", 100 * k)
            if k % 3 < 2:
                buf[:] = xs[r]
                hpccoll.allreduce(comm, MPI.IN_PLACE, buf, algorithm=algorithm)
                assert np.array_equal(buf, np.sum(xs, axis=0)), (algorithm, k)
                gathered[:] = -1
                gathered[r * n:(r + 1) * n] = xs[r]
                hpccoll.allgather(comm, MPI.IN_PLACE, gathered, algorithm=algorithm)
                assert np.array_equal(gathered, np.concatenate(xs)), (algorithm, k)
            else:
                other[:] = xs[r]
                hpccoll.allreduce(comm, other, buf, algorithm=algorithm)
                assert np.array_equal(buf, np.sum(xs, axis=0)), (algorithm, k)
                hpccoll.allgather(comm, other, gathered, algorithm=algorithm)
                assert np.array_equal(gathered, np.concatenate(xs)), (algorithm, k)


@pytest.mark.mpi(ranks=[1, 2, 3], timeout=300)
def test_zero_size_calls_among_real_ones(mpi_ranks, comm):
    """Calls that move nothing (every rank's arrays empty) return at once, repeated or not,
    between calls of the same collective that move data on the same and on new arrays: each
    of those results NumPy's, and a zero-size call that does not match (empty send, full
    receive) still raises.  Non-blocking and persistent calls that move nothing are complete
    when started (no operation is built, or the request is made complete from C), bcast's
    too."""
    import hpccoll
    from hpccoll.requests import COMPLETED
    p, r = comm.size, comm.rank
    for collective in COLLECTIVES + ("bcast",):
        for algorithm in ("native", "auto", "binomial" if collective == "bcast" else
                          scheduled(collective, p)):
            empty = [np.empty(0, np.int64)] * (1 if collective == "bcast" else 2)
            for k in range(3):
                request = getattr(hpccoll, "i" + collective)(comm, *empty, algorithm=algorithm)
                started = request._operation        # (None: a request the C entry made done)
                request.wait()
                assert k == 0 or started is COMPLETED or started is None, \
                    (collective, algorithm, k)
            persistent = getattr(hpccoll, collective + "_init")(comm, *empty,
                                                                 algorithm=algorithm)
            for k in range(2):
                persistent.start()
                started = persistent._operation
                persistent.wait()
                assert started is COMPLETED, (collective, algorithm, k)
            persistent.free()
            if collective == "bcast":
                continue
            full = [np.empty(send_size(collective, p, 3), np.int64),
                    np.empty(recv_size(collective, p, 3), np.int64)]
            for k, n in enumerate((0, 0, 3, 0, 3, 3, 0)):
                send, recv = (np.empty(0, np.int64), np.empty(0, np.int64)) if n == 0 else \
                    full if k % 2 else [np.empty_like(a) for a in full]
                xs = inputs(p, send.size, "int64", 10 * k)
                send[...] = xs[r]
                recv[...] = -7
                call(hpccoll, comm, collective, send, recv, "sum", algorithm)
                want = expected(collective, xs, r, "sum")
                assert np.array_equal(recv, want), (collective, algorithm, k, recv, want)
            with pytest.raises(ValueError):
                call(hpccoll, comm, collective, np.empty(0, np.int64),
                     np.empty(recv_size(collective, p, 2), np.int64), "sum", algorithm)


@pytest.mark.mpi(ranks=[1, 2, 3], timeout=300)
def test_rooted_repeats(mpi_ranks, comm, monkeypatch):
    """bcast and reduce repeated (native on the compiled executor: MPI_Ibcast, MPI_Ireduce;
    auto; binomial), for the first and last root, the root's reduce also in place, the other
    ranks' receive buffer None: no validation after the first call, each result NumPy's."""
    import hpccoll
    from hpccoll import api
    from hpccoll.runtime import libmpi
    from mpi4py import MPI
    p, r = comm.size, comm.rank
    n = 6
    for algorithm in ("native", "auto", "binomial"):
        for root in sorted({0, p - 1}):
            buf, send, out = np.empty(n, np.int32), np.empty(n, np.int32), np.empty(n, np.int32)
            for in_place in (False, True):
                validated, bound = [], []
                prepare, run = api.prepare, api.LastCall.run
                monkeypatch.setattr(api, "prepare",
                                    lambda *a, **k: validated.append(1) or prepare(*a, **k))
                monkeypatch.setattr(api.LastCall, "run",
                                    lambda *a: bound.append(1) or run(*a))
                for k in range(4):
                    xs = inputs(p, n, "int32", 1000 * k + root)
                    buf[:] = xs[r]
                    hpccoll.bcast(comm, buf, root=root, algorithm=algorithm)
                    assert np.array_equal(buf, xs[root]), (algorithm, root, k)
                    send[:] = xs[r]
                    out[:] = -1
                    if in_place and r == root:
                        out[:] = xs[r]
                        hpccoll.reduce(comm, MPI.IN_PLACE, out, root=root, algorithm=algorithm)
                    else:
                        hpccoll.reduce(comm, send, out if r == root else None, root=root,
                                       algorithm=algorithm)
                    want = np.sum(xs, axis=0, dtype=np.int32) if r == root else -1
                    assert np.array_equal(out, np.broadcast_to(want, n)), (algorithm, root, k)
                monkeypatch.setattr(api, "prepare", prepare)
                monkeypatch.setattr(api.LastCall, "run", run)
                # validated: the first call of each (in place: the root's new reduce only);
                # bound on the Python executor: at most the first repeat of each, whose
                # binding the compiled executor runs from then on
                want_validated = (1 if r == root else 0) if in_place else 2
                assert len(validated) == want_validated, (algorithm, root, in_place, validated)
                assert len(bound) <= 2, (algorithm, root, in_place, len(bound))
                if algorithm == "native" and libmpi.available():
                    assert api._last_calls["bcast"].prepared.compiled is not None
                    assert api._last_calls["reduce"].prepared.compiled is not None


@pytest.mark.mpi(ranks=[3], timeout=300)
def test_repeats_with_counts_compare_them_by_value(mpi_ranks, comm, monkeypatch):
    """allgather and reduce_scatter with uneven recvcounts (native and a scheduled
    algorithm), blocking and non-blocking: the same list again, a new list of the same
    numbers, the same tuple again repeat without validation; a first tuple, the list changed
    in place (with arrays of the new sizes) and NumPy-array counts (every call) are validated;
    every result NumPy's."""
    import hpccoll
    from hpccoll import api
    p, r = comm.size, comm.rank
    seed = iter(range(10_000))
    for collective in ("allgather", "reduce_scatter"):
        for algorithm in ("native", "ring"):
            for form in ("blocking", "nonblocking"):
                counts = [2 * k + 1 for k in range(p)]
                validated = []
                prepare = api.prepare
                monkeypatch.setattr(api, "prepare",
                                    lambda *a, **k: validated.append(1) or prepare(*a, **k))
                steps = [(counts, 1), (counts, 0), (list(counts), 0), (tuple(counts), 1),
                         (tuple(counts), 0), ("grown", 1), (counts, 0),
                         (np.array(counts), 1), (np.array(counts), 1)]
                for given, validations in steps:
                    if isinstance(given, str):
                        counts[0] += 2          # in place: the same list object
                        given = counts
                    sizes = list(given)
                    if collective == "allgather":
                        xs = inputs(p, max(sizes), "int32", next(seed))
                        xs = [x[:n] for x, n in zip(xs, sizes)]
                        send, want = xs[r].copy(), np.concatenate(xs)
                    else:
                        xs = inputs(p, sum(sizes), "int32", next(seed))
                        send = xs[r].copy()
                        start = sum(sizes[:r])
                        want = np.sum(xs, axis=0, dtype=np.int32)[start:start + sizes[r]]
                    recv = np.full(want.size, -1, np.int32)
                    before = len(validated)
                    if form == "blocking":
                        getattr(hpccoll, collective)(comm, send, recv, recvcounts=given,
                                                     algorithm=algorithm)
                    else:
                        getattr(hpccoll, "i" + collective)(comm, send, recv, recvcounts=given,
                                                           algorithm=algorithm).wait()
                    assert np.array_equal(recv, want), (collective, algorithm, form, given)
                    assert len(validated) - before == validations, \
                        (collective, algorithm, form, given, validations)
                monkeypatch.setattr(api, "prepare", prepare)


@pytest.mark.mpi(ranks=[3], timeout=300)
def test_alltoallv_repeats_compare_its_buffer_specs_by_value(mpi_ranks, comm, monkeypatch):
    """``hpccoll.alltoallv`` with ``[array, counts, displs]`` specs (native and a scheduled
    algorithm, blocking and non-blocking): the same spec lists again, new lists of the same
    numbers (on the same arrays or on others of the same sizes) repeat without validation;
    tuples where lists were, counts changed in place (the same list objects) and NumPy-array
    counts (every call) are validated; every result NumPy's.  (Before, every call with specs
    was validated anew: ~8 us, twice mpi4py's whole call at 8 B, perf/percall.md.)"""
    import hpccoll
    from hpccoll import api
    p, r = comm.size, comm.rank
    seed = iter(range(10_000))
    for algorithm in ("native", "pairwise"):
        for form in ("blocking", "nonblocking"):
            counts = [[(q + j) % 3 + 1 for j in range(p)] for q in range(p)]  # q sends j
            sends, receives = counts[r], [counts[q][r] for q in range(p)]
            xs = inputs(p, 64, "int64", next(seed))
            validated = []
            prepare = api.prepare
            monkeypatch.setattr(api, "prepare",
                                lambda *a, **k: validated.append(1) or prepare(*a, **k))
            given = None
            for step, validations in (("new", 1), ("same", 0), ("lists", 0), ("new", 0),
                                      ("tuples", 1), ("tuples", 0), ("own", 1), ("own", 0),
                                      ("grown", 1), ("lists", 0), ("numpy", 1), ("numpy", 1)):
                if step == "grown":             # every rank sends rank 0 one more element
                    for row in counts:
                        row[0] += 1
                    receives[:] = [counts[q][r] for q in range(p)]
                if step in ("new", "grown"):
                    send = np.empty(sum(sends), np.int64)
                    recv = np.empty(sum(receives), np.int64)
                if step != "same":
                    make = {"tuples": tuple, "numpy": np.array}.get(step, list)
                    given = ([send, make(sends), make([sum(sends[:k]) for k in range(p)])],
                             [recv, make(receives), make([sum(receives[:k]) for k in range(p)])])
                    if step in ("own", "grown"):    # grown: the last call's lists, changed
                        given = ([send, sends, given[0][2]], [recv, receives, given[1][2]])
                send[...] = xs[r][:send.size]
                recv[...] = -1
                want = np.concatenate([xs[q][sum(counts[q][:r]):sum(counts[q][:r + 1])]
                                       for q in range(p)])
                before = len(validated)
                if form == "blocking":
                    hpccoll.alltoallv(comm, *given, algorithm=algorithm)
                else:
                    hpccoll.ialltoallv(comm, *given, algorithm=algorithm).wait()
                assert np.array_equal(recv, want), (algorithm, form, step)
                assert len(validated) - before == validations, \
                    (algorithm, form, step, validations)
            monkeypatch.setattr(api, "prepare", prepare)


@pytest.mark.mpi(ranks=[1], timeout=300)
def test_one_rank_starts_are_copies_whatever_the_shapes(mpi_ranks, comm):
    """On one rank a scheduled algorithm's non-blocking and persistent starts copy the send
    buffer into the receive buffer at once, also between arrays of one size and different
    shapes (a 3x4 send into a flat receive buffer, and back), and in place change nothing."""
    import hpccoll
    from mpi4py import MPI
    for algorithm in ("ring", "auto"):
        for shapes in (((3, 4), (12,)), ((12,), (2, 6)), ((12,), (12,))):
            x = np.arange(12, dtype=np.float64).reshape(shapes[0])
            y = np.zeros(shapes[1])
            hpccoll.iallreduce(comm, x, y, algorithm=algorithm).wait()
            assert np.array_equal(y.reshape(-1), x.reshape(-1)), (algorithm, shapes)
            y[...] = 0
            request = hpccoll.allgather_init(comm, x, y, algorithm=algorithm)
            for _ in range(2):
                request.start()
                request.wait()
                assert np.array_equal(y.reshape(-1), x.reshape(-1)), (algorithm, shapes)
            request.free()
        z = np.arange(5.0)
        hpccoll.iallreduce(comm, MPI.IN_PLACE, z, algorithm=algorithm).wait()
        assert np.array_equal(z, np.arange(5.0))


@pytest.mark.mpi(ranks=[1], timeout=300)
def test_one_rank_starts_are_served_from_c(mpi_ranks, comm, monkeypatch):
    """On one rank a repeated non-blocking start that runs no executor -- a scheduled
    algorithm's copy of the send buffer (other arrays of the validated dtype and size too, of
    any shape), in place, a bcast, a call of zero elements -- is started by its C entry, not
    the Python path, and returns a request already complete, the copy made and a tag slot
    drawn as from Python; a start of another size or dtype is declined and validated anew
    (and a bad buffer refused) there."""
    import hpccoll
    from hpccoll import api
    from hpccoll.context import context
    from hpccoll.runtime import entry
    from mpi4py import MPI
    assert entry.COMPILED, "the C entry was not built (setup.py: it needs a C compiler)"
    python_starts = []
    start_collective = api.start_collective
    monkeypatch.setattr(api, "start_collective",
                        lambda *a: python_starts.append(a[0]) or start_collective(*a))
    x, y = np.arange(12.0), np.zeros(12)
    flat, grid = np.arange(12.0) + 100, np.zeros((3, 4))
    b, empty_send, empty_recv = np.arange(6.0), np.zeros(0), np.zeros(0)
    starts = [          # (the start on (send, recv), its arrays, what recv must hold after)
        (lambda s, r: hpccoll.iallreduce(comm, s, r, algorithm="ring"), (x, y), x),
        (lambda s, r: hpccoll.iallreduce(comm, s, r, algorithm="ring"), (flat, grid), flat),
        (lambda s, r: hpccoll.iallgather(comm, s, r, algorithm="bruck"), (x, y), x),
        (lambda s, r: hpccoll.iallreduce(comm, MPI.IN_PLACE, r, algorithm="ring"),
         (None, y), np.arange(12.0) + 7),
        (lambda s, r: hpccoll.ibcast(comm, r, root=0, algorithm="binomial"), (None, b),
         np.arange(6.0)),
        (lambda s, r: hpccoll.iallreduce(comm, s, r, algorithm="ring"),
         (empty_send, empty_recv), empty_send)]
    for k, (start, (send, recv), want) in enumerate(starts):
        for turn in range(3):
            python_starts.clear()
            if send is None:
                recv[...] = want
            else:
                recv[...] = -1
            slot = context(comm).slot
            request = start(send, recv)
            assert request.test() or turn == 0, (k, turn)       # (from C: done at the start)
            request.wait()
            assert np.array_equal(recv.reshape(-1), want), (k, turn, recv)
            assert context(comm).slot == slot % (context(comm).slots - 1) + 1, (k, turn)
            assert len(python_starts) == (turn == 0 and k not in (1,)), (k, turn)
    for other, refused in ((np.zeros(6), None), (np.zeros(12, np.float32), None),
                           (np.zeros(24)[::2], ValueError)):
        hpccoll.iallreduce(comm, x, y, algorithm="ring").wait()
        python_starts.clear()
        if refused:
            with pytest.raises(refused):
                hpccoll.iallreduce(comm, x, other, algorithm="ring")
        else:
            source = np.arange(other.size, dtype=other.dtype)
            hpccoll.iallreduce(comm, source, other, algorithm="ring").wait()
            assert np.array_equal(other, source)
        assert python_starts == ["allreduce"], (other.shape, other.dtype)


@pytest.mark.mpi(ranks=[1, 2], timeout=300)
def test_persistent_runs_on_no_executor_are_served_from_c(mpi_ranks, comm, monkeypatch):
    """A persistent request that runs no executor -- on one rank a scheduled algorithm's copy
    of the send buffer (arrays of other shapes, in place, a bcast), at any rank count a call
    of zero elements -- starts from C after making the request: the copy made at the start,
    the request active until waited or tested (a second start before then raises, as MPI's
    persistent requests do) and inactive after; in check mode the start is Python's."""
    import hpccoll
    from hpccoll import requests
    from hpccoll.runtime import entry
    from mpi4py import MPI
    assert entry.COMPILED, "the C entry was not built (setup.py: it needs a C compiler)"
    python_starts = []
    start = requests.PersistentRequest._start
    monkeypatch.setattr(requests.PersistentRequest, "_start",
                        lambda self: python_starts.append(self) or start(self))
    x, y = np.arange(12.0), np.zeros(12)
    grid, b = np.zeros((3, 4)), np.arange(6.0)
    empty_send, empty_recv = np.zeros(0), np.zeros(0)
    made = [            # (the request on (send, recv), its arrays, what recv must hold after)
        (lambda s, r: hpccoll.allreduce_init(comm, s, r, algorithm="ring"),
         (empty_send, empty_recv), empty_send)]
    if comm.size == 1:
        made += [
            (lambda s, r: hpccoll.allreduce_init(comm, s, r, algorithm="ring"), (x, y), x),
            (lambda s, r: hpccoll.allgather_init(comm, s, r, algorithm="bruck"), (x, grid), x),
            (lambda s, r: hpccoll.allreduce_init(comm, MPI.IN_PLACE, r, algorithm="ring"),
             (None, y), np.arange(12.0) + 7),
            (lambda s, r: hpccoll.bcast_init(comm, r, root=0, algorithm="binomial"), (None, b),
             np.arange(6.0))]
    for k, (make, (send, recv), want) in enumerate(made):
        request = make(send, recv)
        for turn in range(3):
            if send is None:
                recv[...] = want
            else:
                recv[...] = -1
                send += turn
                want = send
            python_starts.clear()
            request.start()
            assert not python_starts, (k, turn)
            assert np.array_equal(recv.reshape(-1), want), (k, turn, recv)
            assert request.active, (k, turn)
            with pytest.raises(RuntimeError, match="started again before it completed"):
                request.start()
            assert request.test() if turn % 2 else request.wait() is None, (k, turn)
            assert not request.active and request.test(), (k, turn)
        previous = hpccoll.configure(check=True)
        try:
            python_starts.clear()
            request.start()
            request.wait()
            assert python_starts == [request], k
        finally:
            hpccoll.configure(**vars(previous))
        request.free()
@pytest.mark.mpi(ranks=[1], timeout=300)
def test_one_rank_repeats_are_copies_of_the_arrays_validated(mpi_ranks, comm, monkeypatch):
    """On one rank a repeat of a scheduled algorithm on the arrays validated last, of their
    shape, is a copy that neither validates nor runs the schedule (both are made to fail
    here, and the results are still right: the four collectives, allreduce in place, reduce).
    In Python (the C entry's stand-in) an array of another shape (reshaped in place), a new
    array or native takes the validating path (made to fail); the C entry copies any arrays
    of the validated dtype and size (C layout, the receive one writable, apart) and declines
    native."""
    import hpccoll
    from hpccoll import api
    from hpccoll.runtime import entry
    from mpi4py import MPI

    class Validated(Exception):
        pass

    def refused(*args, **kw):
        raise Validated

    def copies(*arrays):
        """The call on these arrays: validated (Python), or their copy (the C entry)."""
        if stand_in:
            with pytest.raises(Validated):
                call(hpccoll, comm, collective, *arrays, "sum", algorithm)
        else:
            arrays[1][...] = -1
            call(hpccoll, comm, collective, *arrays, "sum", algorithm)
            assert np.array_equal(arrays[1].reshape(-1), arrays[0].reshape(-1))

    for stand_in in (True, False):
        for collective in COLLECTIVES:
            for algorithm in (scheduled(collective, 1),):   # (auto may be native: the table)
                n = 1000
                send, recv = np.empty(n, np.int64), np.empty(n, np.int64)
                call(hpccoll, comm, collective, send, recv, "sum", algorithm)
                with monkeypatch.context() as patch:
                    patch.setattr(api, "prepare", refused)
                    patch.setattr(api.LastCall, "run", refused)
                    patch.setattr(api._last_calls[collective], "executor", None)
                    if stand_in:
                        patch.setattr(api, f"_entry_{collective}", entry.StandIn())
                    for k in range(3):
                        send[:] = np.arange(n) * (k + 1)
                        recv[:] = -1
                        call(hpccoll, comm, collective, send, recv, "sum", algorithm)
                        assert np.array_equal(recv, send), (collective, algorithm, k)
                    for reshaped in (send, recv):           # (weakly referenced: NumPy lets
                        reshaped.shape = (2, n // 2)        # them be reshaped, not resized)
                        copies(send, recv)
                        reshaped.shape = (n,)
                    copies(send.copy(), recv)
                    with pytest.raises(Validated):
                        call(hpccoll, comm, collective, send, recv, "sum", "native")
                send[:] = 7
                call(hpccoll, comm, collective, send, recv, "sum", algorithm)
                assert np.all(recv == 7), (collective, algorithm)
    vector_send, placed = np.arange(6), np.full(6, 7)
    for stand_in in (True, False):      # a vector call is no copy: its counts place blocks
        with monkeypatch.context() as patch:
            if stand_in:
                patch.setattr(api, "_entry_alltoallv", entry.StandIn())
            for k in range(3):          # (the same arrays again: once copied whole)
                placed[:] = 7
                hpccoll.alltoallv(comm, [vector_send, [1], [0]], [placed, [1], [2]],
                                  algorithm="pairwise")
                assert placed.tolist() == [7, 7, 0, 7, 7, 7], (stand_in, k, placed)
    buf = np.arange(50_000, dtype=np.float64)
    send, recv = np.arange(50_000, dtype=np.int32), np.zeros(50_000, np.int32)
    hpccoll.allreduce(comm, MPI.IN_PLACE, buf, algorithm="ring")
    hpccoll.reduce(comm, send, recv, op=MPI.MAX, algorithm="binomial")
    with monkeypatch.context() as patch:
        patch.setattr(api, "prepare", refused)
        patch.setattr(api.LastCall, "run", refused)
        for k in range(2):
            hpccoll.allreduce(comm, MPI.IN_PLACE, buf, algorithm="ring")
            assert np.array_equal(buf, np.arange(50_000, dtype=np.float64))
            send += k + 1
            hpccoll.reduce(comm, send, recv, op=MPI.MAX, algorithm="binomial")
            assert np.array_equal(recv, send)


@pytest.mark.mpi(ranks=[1, 2, 3], timeout=300)
def test_the_c_entry_serves_repeats_and_declines_every_change(mpi_ranks, comm, monkeypatch):
    """A repeated blocking call on a compiled executor (native, a scheduled algorithm; arrays,
    specs, IN_PLACE, a rooted call whose other ranks pass no receive buffer) is served by the
    collective's C entry, without the Python path; each change of the call -- other arrays
    (scheduled: bound to their addresses), sizes, spec numbers, dtype, op, algorithm,
    options, a strided or read-only buffer, the validated calls forgotten -- is declined and
    served (or refused) by the Python path; every result is NumPy's.  Then the same as a
    build without a C compiler runs: the entry's stand-in, which declines everything, and
    executors that call their Numba functions from Python (entry.Dispatched)."""
    import hpccoll
    from hpccoll import api
    from hpccoll.runtime import entry, libmpi
    from mpi4py import MPI
    p, r = comm.size, comm.rank
    assert entry.COMPILED, "the C entry was not built (setup.py: it needs a C compiler)"
    python_calls = []
    run_collective = api.run_collective
    monkeypatch.setattr(api, "run_collective",
                        lambda *a: python_calls.append(a[0]) or run_collective(*a))
    xs = [np.arange(8.0) + 10 * k for k in range(p)]
    total = np.sum(xs, axis=0)

    def served(make, want, out, through_c):
        """Call ``make()`` four times, checking ``out`` against ``want`` each time; the last
        two (a scheduled call runs compiled from its second repeat) served by the entry, or
        by Python if not ``through_c``."""
        for k in range(4):
            python_calls.clear()
            out[...] = -1
            make()
            assert np.array_equal(out, want), (k, out, want)
            if k >= 2:
                assert (python_calls == []) == through_c, (k, python_calls)

    for stand_in in (False, True):
        if stand_in:        # (and executors made from now on call Numba from Python)
            for name in api._entries:
                monkeypatch.setattr(api, f"_entry_{name}", entry.StandIn())
                monkeypatch.setitem(api._entries, name, getattr(api, f"_entry_{name}"))
            monkeypatch.setattr(entry, "COMPILED", False)
            hpccoll.configure(timeout=hpccoll.settings.current.timeout)   # forgets calls
        for algorithm in ("native", "ring"):
            # (a scheduled call at 1 rank is a copy, which the entry makes itself)
            through_c = not stand_in and (libmpi.available() or p == 1 and algorithm == "ring")
            rooted, varied = ("binomial", "pairwise") if algorithm == "ring" else (algorithm,) * 2
            counts, displs = [2] * p, [2 * q for q in range(p)]
            a, b = np.arange(2.0 * p) + 100 * r, np.empty(2 * p)
            exchanged = np.concatenate([np.arange(2.0 * p)[2 * r:2 * r + 2] + 100 * q
                                        for q in range(p)])
            x, y, z, gathered = xs[r].copy(), np.empty(8), np.empty(8), np.empty(8 * p)
            root_out = np.empty(8) if r == p - 1 else None
            mine = np.empty(8) if root_out is None else root_out

            def in_place():
                z[:] = xs[r]
                hpccoll.allreduce(comm, MPI.IN_PLACE, z, algorithm=algorithm)

            def bcast():
                if r == 0:
                    z[:] = xs[0]
                hpccoll.bcast(comm, z, algorithm=rooted)
            for make, want, out in (
                    (lambda: hpccoll.allreduce(comm, x, y, algorithm=algorithm), total, y),
                    (lambda: hpccoll.alltoallv(comm, [a, counts, displs], [b, counts, displs],
                                               algorithm=varied), exchanged, b),
                    (in_place, total, z),
                    (lambda: hpccoll.allgather(comm, x, gathered, algorithm=algorithm),
                     np.concatenate(xs), gathered),
                    (lambda: hpccoll.reduce(comm, x, root_out, root=p - 1, algorithm=rooted),
                     total if r == p - 1 else np.full(8, -1.0), mine),
                    (bcast, xs[0], z)):
                served(make, want, out, through_c)
            executor = api._last_calls["allreduce"].executor
            if executor is not None:
                assert isinstance(executor.bound, entry.Dispatched if stand_in else entry.Bound)
            if algorithm == "native" and libmpi.available():    # MPI_Start, compiled
                request = hpccoll.allreduce_init(comm, x, y, algorithm=algorithm)
                for _ in range(3):
                    y[...] = -1
                    request.start()
                    request.wait()
                    assert np.array_equal(y, total)
                assert isinstance(request._executor.bound,
                                  entry.Dispatched if stand_in else entry.Bound)
                request.free()
            other = np.empty(8)
            changes = [    # (the call changed, the array it writes, what it must hold)
                (lambda: hpccoll.allreduce(comm, x.copy(), other, algorithm=algorithm),
                 other, total),     # (other arrays: the same native or 1-rank call)
                (lambda: hpccoll.allreduce(comm, x, y, op=MPI.MAX, algorithm=algorithm),
                 y, np.max(xs, axis=0)),
                (lambda: hpccoll.allreduce(comm, x, y, algorithm=algorithm, options={}),
                 y, total),
                (lambda: hpccoll.allreduce(comm, x[:4], y[:4], algorithm=algorithm),
                 y[:4], total[:4]),
                (lambda: hpccoll.alltoallv(comm, [a, tuple(counts), displs],
                                           [b, counts, displs], algorithm=varied), b,
                 exchanged),
                (lambda: hpccoll.allreduce(comm, x.astype(np.float32), other[:4].view(
                    np.float32), algorithm=algorithm), other[:4].view(np.float32),
                 total.astype(np.float32)),
                (lambda: hpccoll.allreduce(comm, x, y, algorithm="ring" if algorithm ==
                                           "native" else "native"), y, total),
            ]
            for k, (change, out, want) in enumerate(changes):
                for _ in range(3):
                    hpccoll.allreduce(comm, x, y, algorithm=algorithm)
                    hpccoll.alltoallv(comm, [a, counts, displs], [b, counts, displs],
                                      algorithm=varied)
                python_calls.clear()
                out[...] = -1
                change()
                served_by_c = k == 0 and (algorithm == "native" or p == 1) and through_c
                assert bool(python_calls) != served_by_c and np.array_equal(out, want), \
                    (algorithm, k, out, python_calls)
            read_only = np.empty(8)
            read_only.flags.writeable = False
            for bad in (np.empty(16)[::2], read_only, x):
                hpccoll.allreduce(comm, x, y, algorithm=algorithm)
                with pytest.raises(ValueError):
                    hpccoll.allreduce(comm, x, bad, algorithm=algorithm)
            for _ in range(3):
                hpccoll.allreduce(comm, x, y, algorithm=algorithm)
            hpccoll.configure(timeout=hpccoll.settings.current.timeout)   # forgets calls
            python_calls.clear()
            hpccoll.allreduce(comm, x, y, algorithm=algorithm)
            assert python_calls == ["allreduce"] and np.array_equal(y, total)


@pytest.mark.mpi(ranks=[1, 2, 3], timeout=300)
def test_the_c_entry_serves_nonblocking_starts_and_declines_every_change(mpi_ranks, comm,
                                                                          monkeypatch):
    """A repeated non-blocking native call (functions: arrays, specs, IN_PLACE, a rooted
    call whose other ranks pass no receive buffer; hpccoll.Comm's I-methods) is started by
    its C entry, without the Python path, and returns a request that the run completes
    (wait(), or test() polled; Comm's Wait()/Test()); each change (sizes, dtype, op,
    algorithm, options, a strided or read-only buffer, the validated calls forgotten) is
    declined and served (or refused) by the Python path.  Every start draws the context's
    next tag slot, from C as from Python (a rank whose starts all go through Python -- its
    entries stand-ins -- runs with the others); two starts in flight at once (the second
    declined: the executor busy) both complete; every result is NumPy's."""
    import hpccoll
    from hpccoll import api
    from hpccoll.runtime import entry, libmpi
    from hpccoll.context import context
    from mpi4py import MPI
    p, r = comm.size, comm.rank
    assert entry.COMPILED, "the C entry was not built (setup.py: it needs a C compiler)"
    python_only = p > 1 and r == p - 1                  # (the last rank of several)
    through_c = libmpi.available() and not python_only
    if python_only:
        for name in api._start_entries:
            monkeypatch.setattr(api, f"_start_{name}", entry.StandIn())
    python_starts = []
    start_collective, last_start = api.start_collective, api.LastCall.start
    monkeypatch.setattr(api, "start_collective",
                        lambda *a: python_starts.append(a[0]) or start_collective(*a))
    monkeypatch.setattr(api.LastCall, "start",      # (Comm's I-methods' Python path)
                        lambda self, *a: python_starts.append("Comm") or last_start(self, *a))
    wrapped = hpccoll.Comm(comm, algorithms={"allreduce": "native", "bcast": "native"})
    if python_only:
        wrapped._entries = defaultdict(entry.StandIn)
    xs = [np.arange(8.0) + 10 * k for k in range(p)]
    total = np.sum(xs, axis=0)
    x, y, z = xs[r].copy(), np.empty(8), np.empty(8)
    root_out = np.empty(8) if r == 0 else None
    counts, displs = [2] * p, [2 * q for q in range(p)]
    a, b = np.arange(2.0 * p) + 100 * r, np.empty(2 * p)
    exchanged = np.concatenate([np.arange(2.0 * p)[2 * r:2 * r + 2] + 100 * q
                                for q in range(p)])

    def in_place():
        z[:] = xs[r]
        return hpccoll.iallreduce(comm, MPI.IN_PLACE, z, algorithm="native")

    def bcast():
        z[:] = xs[0] if r == 0 else -1
        return wrapped.Ibcast([z, 8, MPI.DOUBLE], root=0)

    def completed(request):
        if hasattr(request, "Wait"):
            if r % 2:
                request.Wait()
            else:
                while not request.Test():
                    pass
        elif r % 2:
            request.wait()
        else:
            while not request.test():
                pass

    def slot():
        return context(comm).slot

    for case, (start, out, want) in enumerate((
            (lambda: hpccoll.iallreduce(comm, x, y, algorithm="native"), y, total),
            (lambda: hpccoll.ialltoallv(comm, [a, counts, displs], [b, counts, displs],
                                        algorithm="native"), b, exchanged),
            (in_place, z, total),
            (lambda: hpccoll.ireduce(comm, x, root_out, root=0, algorithm="native"),
             root_out if r == 0 else None, total),
            (lambda: wrapped.Iallreduce(x, y), y, total),
            (bcast, z, xs[0]))):
        for k in range(4):
            python_starts.clear()
            if out is not None:
                out[...] = -1
            before = slot()
            completed(start())
            assert out is None or np.array_equal(out, want), (case, k, out, want)
            if k >= 1:
                assert (python_starts == []) == through_c, (case, k, python_starts)
                assert slot() == before % (context(comm).slots - 1) + 1, (case, k, before)
    python_starts.clear()
    y[...] = z[...] = -1
    first, second = [hpccoll.iallreduce(comm, x, out, algorithm="native") for out in (y, z)]
    second.wait()
    first.wait()
    assert np.array_equal(y, total) and np.array_equal(z, total)
    assert python_starts.count("allreduce") == (1 if through_c else 2), python_starts
    other = np.empty(8)
    changes = [     # (the start changed, the array it writes, what it must hold)
        (lambda: hpccoll.iallreduce(comm, x.copy(), other, algorithm="native"), other,
         total, True),          # (other arrays of the same sizes: the same native call)
        (lambda: hpccoll.iallreduce(comm, x, y, op=MPI.MAX, algorithm="native"), y,
         np.max(xs, axis=0), False),
        (lambda: hpccoll.iallreduce(comm, x, y, algorithm="native", options={}), y, total,
         False),
        (lambda: hpccoll.iallreduce(comm, x[:4], y[:4], algorithm="native"), y[:4],
         total[:4], False),
        (lambda: hpccoll.iallreduce(comm, x.astype(np.float32), other.view(np.float32)[:8],
                                    algorithm="native"), other.view(np.float32)[:8],
         total.astype(np.float32), False),
        (lambda: hpccoll.iallreduce(comm, x, y, algorithm="ring"), y, total, False),
        (lambda: hpccoll.ialltoallv(comm, [a, tuple(counts), displs], [b, counts, displs],
                                    algorithm="native"), b, exchanged, False),
    ]
    for k, (change, out, want, same_call) in enumerate(changes):
        for _ in range(2):
            hpccoll.iallreduce(comm, x, y, algorithm="native").wait()
            hpccoll.ialltoallv(comm, [a, counts, displs], [b, counts, displs],
                               algorithm="native").wait()
        python_starts.clear()
        out[...] = -1
        change().wait()
        assert (python_starts == []) == (same_call and through_c), (k, python_starts)
        assert np.array_equal(out, want), (k, out, want)
    read_only = np.empty(8)
    read_only.flags.writeable = False
    for bad in (np.empty(16)[::2], read_only, x):
        hpccoll.iallreduce(comm, x, y, algorithm="native").wait()
        with pytest.raises(ValueError):
            hpccoll.iallreduce(comm, x, bad, algorithm="native")
    hpccoll.iallreduce(comm, x, y, algorithm="native").wait()
    hpccoll.configure(timeout=hpccoll.settings.current.timeout)   # forgets calls
    python_starts.clear()
    y[...] = -1
    hpccoll.iallreduce(comm, x, y, algorithm="native").wait()
    assert python_starts[:1] == ["allreduce"] and np.array_equal(y, total)


@pytest.mark.mpi(ranks=[1, 2], timeout=300)
def test_bad_buffers_on_a_repeat_raise_before_sending(mpi_ranks, comm):
    """After a call has been made (the fast path armed), a repeat with a read-only, too
    small, overlapping, strided or other-dtype buffer raises the validation error on every
    rank, and the next good call returns the right result."""
    import hpccoll
    from mpi4py import MPI
    p, r = comm.size, comm.rank
    for algorithm in ("native", "ring", "auto"):
        x = np.full(4, r + 1.0)
        y = np.zeros(4)
        hpccoll.allreduce(comm, x, y, algorithm=algorithm)
        read_only = np.zeros(4)
        read_only.flags.writeable = False
        big = np.zeros(8)
        cases = [
            ("read-only recvbuf", ValueError, lambda: hpccoll.allreduce(
                comm, x, read_only, algorithm=algorithm)),
            ("recvbuf too small", ValueError, lambda: hpccoll.allreduce(
                comm, x, y[:3], algorithm=algorithm)),
            ("the same array twice", ValueError, lambda: hpccoll.allreduce(
                comm, y, y, algorithm=algorithm)),
            ("overlapping views", ValueError, lambda: hpccoll.allreduce(
                comm, big[:4], big[2:6], algorithm=algorithm)),
            ("strided recvbuf", ValueError, lambda: hpccoll.allreduce(
                comm, x, big[::2], algorithm=algorithm)),
            ("dtypes differ", TypeError, lambda: hpccoll.allreduce(
                comm, x, y.astype(np.float32), algorithm=algorithm)),
        ]
        for name, error, bad in cases:
            with pytest.raises(error):
                bad()
            y[:] = -1
            hpccoll.allreduce(comm, x, y, algorithm=algorithm)
            assert np.all(y == p * (p + 1) / 2), (algorithm, name, y)
        y[:] = x
        hpccoll.allreduce(comm, MPI.IN_PLACE, y, algorithm=algorithm)
        assert np.all(y == p * (p + 1) / 2), (algorithm, "in place")


@pytest.mark.mpi(ranks=[2, 3], timeout=300)
def test_failure_model_on_the_compiled_executor(mpi_ranks, comm):
    """On repeats run by the compiled executors (native; ring and recursive doubling on the
    scheduled one), 16 B and 1 MiB: a late peer within the deadline gives the right result;
    the last rank skipping a call makes the others raise CollectiveTimeout (or
    CommunicatorRevoked from a peer's notice), the receive buffer held while MPI may write
    it (a scheduled call's receives are cancelled: held while a send is pending, as a
    1 MiB one to the absent rank at 2 ranks), every later call raises CommunicatorRevoked,
    and after recover() the right sums."""
    import hpccoll
    from hpccoll import api
    from hpccoll.runtime import abandoned, libmpi
    p, r = comm.size, comm.rank
    right = p * (p + 1) / 2
    for algorithm in ("native", "ring", "recursive_doubling"):
        for n in (2, 131072):
            x = np.full(n, r + 1.0)
            y = np.zeros(n)
            for _ in range(3):
                hpccoll.allreduce(comm, x, y, algorithm=algorithm)
            last = api._last_calls["allreduce"]
            assert libmpi.available() <= (last.executor is not None)
            previous = hpccoll.configure(timeout=1)
            try:
                for _ in range(3):
                    if r == p - 1:
                        time.sleep(0.3)                         # late, within the deadline
                    y[:] = -1
                    hpccoll.allreduce(comm, x, y, algorithm=algorithm)
                    assert np.all(y == right)
                label = f"allreduce/{algorithm}"
                if r == p - 1:
                    time.sleep(1.5)                             # skips the call
                else:
                    with pytest.raises((hpccoll.CollectiveTimeout,
                                        hpccoll.CommunicatorRevoked)) as error:
                        hpccoll.allreduce(comm, x, y, algorithm=algorithm)
                    if isinstance(error.value, hpccoll.CollectiveTimeout):
                        assert label in str(error.value)
                        kept = weakref.ref(y)
                        y = np.zeros(n)
                        gc.collect()
                        if algorithm == "native" or n > 2 and p == 2:
                            assert kept() is not None and label in abandoned.held()
                    with pytest.raises(hpccoll.CommunicatorRevoked, match="recover"):
                        hpccoll.allreduce(comm, x, y, algorithm=algorithm)
                hpccoll.recover(comm)
                for k in (1.0, 2.0, 3.0):
                    x[:] = k * (r + 1)
                    y[:] = -1
                    hpccoll.allreduce(comm, x, y, algorithm=algorithm)
                    assert np.all(y == k * right), (k, y)
            finally:
                hpccoll.configure(**vars(previous))


@pytest.mark.mpi(ranks=[2], timeout=300)
def test_revocation_notice_reaches_a_compiled_wait(mpi_ranks, comm):
    """Rank 0 revokes (its scheduled call times out while rank 1 waits in a repeat on a
    compiled executor -- native, then ring -- that rank 0 never joins): rank 1's call raises
    CommunicatorRevoked naming rank 0's failure, long before its own deadline."""
    import hpccoll
    p, r = comm.size, comm.rank
    for algorithm in ("native", "ring"):
        x = np.full(65536, r + 1.0)
        y = np.zeros(65536)
        for _ in range(3):
            hpccoll.allreduce(comm, x, y, algorithm=algorithm)
        previous = hpccoll.configure(timeout=30 if r else 0.5)
        try:
            began = time.monotonic()
            if r == 0:
                with pytest.raises(hpccoll.CollectiveTimeout):
                    hpccoll.allgather(comm, x, np.zeros(65536 * p), algorithm="ring")
            else:
                with pytest.raises(hpccoll.CommunicatorRevoked, match="revoked by rank 0"):
                    hpccoll.allreduce(comm, x, y, algorithm=algorithm)
                assert time.monotonic() - began < 20
            comm.Barrier()
            hpccoll.recover(comm)
            hpccoll.allreduce(comm, x, y, algorithm=algorithm)
            assert np.all(y == 3.0)
        finally:
            hpccoll.configure(**vars(previous))


REDUCERS = {"sum": np.add, "prod": np.multiply, "max": np.maximum, "min": np.minimum,
            "land": np.logical_and, "lor": np.logical_or, "bxor": np.bitwise_xor}
TYPED_OPS = (("float64", "sum"), ("int32", "prod"), ("int16", "bxor"), ("complex64", "sum"),
             ("bool", "land"), ("uint8", "min"))


def reduced(collective: str, xs: list[np.ndarray], rank: int, op: str,
            counts: list[int] | None = None) -> np.ndarray:
    """The result of a reducing collective (``counts``: reduce_scatter's, if uneven)."""
    total = xs[0].copy()
    for x in xs[1:]:
        total = REDUCERS[op](total, x).astype(x.dtype)
    if collective == "allreduce":
        return total
    counts = counts or [total.size // len(xs)] * len(xs)
    first = sum(counts[:rank])
    return total[first:first + counts[rank]]


def applicable(collective: str, p: int) -> list[str]:
    """Every scheduled algorithm that applies at ``p`` ranks to an evenly split call."""
    from hpccoll import registry
    from hpccoll.collectives import uniform_call
    plain = uniform_call(collective, p, 0, 1)
    return [a.name for a in registry.algorithms(collective) if a.name != "csc" and
            a.violated(plain) is None]


@pytest.mark.mpi(ranks=[3, 4], timeout=600)
def test_compiled_scheduled_executor_on_every_algorithm(mpi_ranks, comm):
    """Every scheduled algorithm of the four collectives, repeated on the same arrays (so
    the compiled executor runs the repeats where the MPI library is known), at 1, 7 and
    1000 elements a block, on every dtype and op the reductions take, and in place for
    allreduce: each result equal to NumPy's on every rank's inputs."""
    import hpccoll
    from hpccoll import api
    from hpccoll.runtime import libmpi
    from mpi4py import MPI
    p, r = comm.size, comm.rank
    seed = iter(range(100_000))
    for collective in COLLECTIVES:
        reduces = collective in ("allreduce", "reduce_scatter")
        for algorithm in applicable(collective, p):
            for dtype, op in TYPED_OPS if reduces else (("float32", "sum"), ("int64", "sum")):
                for n in (1, 7, 1000):
                    send = np.empty(send_size(collective, p, n), dtype)
                    recv = np.empty(recv_size(collective, p, n), dtype)
                    for repeat in range(3):
                        xs = inputs(p, send.size, dtype, next(seed))
                        send[...] = xs[r]
                        recv[...] = 1
                        if reduces:
                            getattr(hpccoll, collective)(comm, send, recv, algorithm=algorithm,
                                                         op=getattr(MPI, op.upper()))
                            want = reduced(collective, xs, r, op)
                        else:
                            getattr(hpccoll, collective)(comm, send, recv, algorithm=algorithm)
                            want = expected(collective, xs, r, op)
                        assert np.array_equal(recv, want), \
                            (collective, algorithm, dtype, op, n, repeat, recv, want)
                    if libmpi.available():
                        assert api._last_calls[collective].executor is not None, \
                            (collective, algorithm, dtype)
            if collective == "allreduce":
                for repeat in range(3):
                    xs = inputs(p, 300, "float64", next(seed))
                    buf = xs[r].copy()
                    hpccoll.allreduce(comm, MPI.IN_PLACE, buf, algorithm=algorithm)
                    assert np.array_equal(buf, np.sum(xs, axis=0)), (algorithm, "in place")


@pytest.mark.mpi(ranks=[2, 3], timeout=600)
def test_persistent_requests_on_the_compiled_executor(mpi_ranks, comm):
    """Persistent collectives of every scheduled algorithm, started ten times each (from the
    second start on the compiled executor), and of native (the library's own persistent
    collective, MPI-4's ``MPI_<Collective>_init``, started by ``MPI_Start``), completed by
    wait() and by polling test(), with uneven counts where the collective takes them: each
    run's result equal to NumPy's, and start() while active raising as on MPI's persistent
    requests; the library's persistent request freed by free(), or when a request left
    unfreed is collected."""
    import gc

    import hpccoll
    from hpccoll.requests import NativePersistent
    from hpccoll.runtime import libmpi
    from hpccoll.runtime.scheduled import Runner
    from mpi4py import MPI
    p, r = comm.size, comm.rank
    seed = iter(range(100_000))
    uneven = [2 * k + 1 for k in range(p)]
    for collective in COLLECTIVES:
        for algorithm in applicable(collective, p) + ["native"]:
            for n, counts in ((5, None), (40000, None), (None, uneven)):
                if counts is not None and algorithm not in applicable_uneven(collective, p) \
                        + ["native"] * (collective in ("allgather", "reduce_scatter")):
                    continue                # (allreduce and alltoall take no counts)
                block = n or max(counts)
                size = sum(counts) if counts else send_size(collective, p, block)
                if collective == "allgather" and counts:
                    send = np.empty(counts[r], np.float64)
                    recv = np.empty(sum(counts), np.float64)
                else:
                    send = np.empty(size, np.float64)
                    recv = np.empty(counts[r] if counts and collective == "reduce_scatter"
                                    else recv_size(collective, p, block), np.float64)
                start = getattr(hpccoll, f"{collective}_init")
                extra = {"recvcounts": counts} if counts else {}
                request = start(comm, send, recv, algorithm=algorithm, **extra)
                sizes = counts if collective == "allgather" and counts else [send.size] * p
                for run in range(10):
                    xs = [x[:size] for x, size in
                          zip(inputs(p, max(sizes), "float64", next(seed)), sizes)]
                    send[...] = xs[r]
                    recv[...] = -1
                    request.start()
                    if run == 0:
                        with pytest.raises(RuntimeError, match="started again"):
                            request.start()
                    if run % 2:
                        while not request.test():
                            pass
                    else:
                        request.wait()
                    if collective == "allgather":
                        want = np.concatenate(xs)
                    elif collective == "alltoall":
                        want = expected(collective, xs, r, "sum")
                    else:
                        want = reduced(collective, xs, r, "sum", counts)
                    assert np.array_equal(recv, want), (collective, algorithm, n, counts, run)
                if algorithm == "native":       # started by the compiled executor
                    persistent = request._persistent
                    assert isinstance(persistent, NativePersistent), collective
                    run = persistent.held.operation
                    assert run is request._executor is persistent.compiled, collective
                    assert run.prequest is persistent.held.request and run.done
                    request.free()
                    assert persistent.held.request is None
                    continue
                fast = isinstance(request._executor, Runner)    # started on the compiled one
                assert libmpi.available() <= fast, (collective, algorithm)
                request.free()
    send, recv = np.ones(10), np.zeros(10)
    request = hpccoll.allreduce_init(comm, send, recv, algorithm="native")
    held = request._persistent.held
    request.start()
    request.wait()
    assert np.array_equal(recv, np.full(10, p)) and held.request is not None
    del request
    gc.collect()
    assert held.request is None
    comm.Barrier()
    assert MPI.Is_initialized()


@pytest.mark.mpi(ranks=[2], timeout=120)
def test_a_completed_request_leaves_the_executor_to_later_starts(mpi_ranks, comm):
    """A compiled executor runs one call at a time and is started again by later calls: a
    request that completed (wait(), or test() True; functions, Comm's I-methods, a persistent
    request on the same arrays) says so at once and never polls the run a later start put on
    the same executor, which rank 1 holds back until rank 0 has asked the old requests (so
    the run cannot have completed); that run completes by its own request, with the right
    sum.  Native and a scheduled algorithm."""
    import hpccoll
    from hpccoll.runtime import libmpi
    r = comm.rank
    n = 1000
    for algorithm in ("native", "ring"):
        x, y = np.full(n, r + 1.0), np.zeros(n)
        wrapped = hpccoll.Comm(comm, algorithms={"allreduce": algorithm})
        persistent = hpccoll.allreduce_init(comm, x, y, algorithm=algorithm)
        for _ in range(3):          # (the executors made: from here every start is on them)
            hpccoll.iallreduce(comm, x, y, algorithm=algorithm).wait()
            wrapped.Iallreduce(x, y).Wait()
            persistent.start()
            persistent.wait()
        olds = []
        for k in range(2):
            old = hpccoll.iallreduce(comm, x, y, algorithm=algorithm)
            if k:
                old.wait()
            while not old.test():
                pass
            olds.append(old.test)
            old = wrapped.Iallreduce(x, y)
            old.Wait()
            olds.append(old.Test)
        olds.append(persistent.test)
        y[...] = 0
        if r == 1:
            comm.recv(source=0, tag=7)
        later = hpccoll.iallreduce(comm, x, y, algorithm=algorithm)
        run = later._operation
        if r == 0:
            assert all(test() for test in olds for _ in range(3)), algorithm
            persistent.wait()
            assert (run.busy if algorithm == "native" else run.binding.busy) == \
                libmpi.available(), algorithm                # still in flight
            comm.send(None, dest=1, tag=7)
        later.wait()
        assert np.all(y == 3.0), algorithm
        persistent.free()


@pytest.mark.mpi(ranks=[2, 3], timeout=300)
def test_nonblocking_repeats_on_the_compiled_executor(mpi_ranks, comm):
    """Non-blocking calls of every scheduled algorithm started again and again on the same
    arrays, through the functions and through hpccoll.Comm: from the third start the
    compiled executor posts them without validation (the binding's Runner in flight),
    completed by wait() or by polling test() (native: the library's call posted and polled
    by the compiled native executor, a NativeCall in flight); four in flight at once (on
    the same send array), completed in reverse order; a start where one rank passes other
    arrays (it validates, the others take the fast path) draws the same tag slot
    everywhere; and bcast and reduce, from every root -- each result equal to NumPy's."""
    import hpccoll
    from hpccoll.runtime.native import NativeCall
    from hpccoll.runtime.scheduled import Runner
    from hpccoll.runtime import libmpi
    p, r = comm.size, comm.rank
    seed = iter(range(100_000))
    started = []                # what each start returned (before its completion)

    def check(collective, algorithm, start, send, recv):
        xs = inputs(p, send.size, "float64", next(seed))
        send[...] = xs[r]
        recv[...] = -1
        request = start(send, recv)
        inner = getattr(request, "_request", request)       # (Comm's: what it wraps)
        started.append(getattr(inner, "_operation", inner))
        if next(seed) % 2:
            test = getattr(request, "Test", request.test)      # (Comm's: mpi4py's names)
            while not test():
                pass
        else:
            request.wait()
        want = reduced(collective, xs, r, "sum") if collective in ("allreduce",
                                                                    "reduce_scatter") \
            else expected(collective, xs, r, "sum")
        assert np.array_equal(recv, want), (collective, algorithm)
        return request

    for collective in COLLECTIVES:
        name = "I" + {"reduce_scatter": "reduce_scatter_block"}.get(collective, collective)
        for algorithm in applicable(collective, p) + ["native"]:
            method = getattr(hpccoll.Comm(comm, algorithms={collective: algorithm}), name)
            send = np.empty(send_size(collective, p, 6), np.float64)
            recv = np.empty(recv_size(collective, p, 6), np.float64)
            function = getattr(hpccoll, "i" + collective)
            for start in (lambda s, r: function(comm, s, r, algorithm=algorithm),
                          lambda s, r: method(s, r)):
                for _ in range(4):
                    check(collective, algorithm, start, send, recv)
                fast = NativeCall if algorithm == "native" else Runner
                assert isinstance(started[-1], fast) == libmpi.available(), (collective,
                                                                             algorithm)
            others = [np.empty_like(recv) for _ in range(4)]
            xs = inputs(p, send.size, "float64", next(seed))
            send[...] = xs[r]
            requests = [function(comm, send, other, algorithm=algorithm) for other in others]
            for request in requests[::-1]:
                request.wait()
            want = expected(collective, xs, r, "sum") if collective in ("allgather",
                                                                         "alltoall") \
                else reduced(collective, xs, r, "sum")
            assert all(np.array_equal(other, want) for other in others), (collective,
                                                                          algorithm)
            mine = (np.empty_like(send), np.empty_like(recv)) if r == 0 else (send, recv)
            check(collective, algorithm, lambda s, r: function(comm, s, r,
                                                               algorithm=algorithm), *mine)
            check(collective, algorithm, lambda s, r: function(comm, s, r,
                                                               algorithm=algorithm), send,
                  recv)
    for algorithm in ("native", "binomial", "chain"):
        for root in range(p):
            buf, total = np.empty(7), np.empty(7)
            for run in range(4):
                xs = inputs(p, 7, "float64", next(seed))
                buf[...] = xs[root] if r == root else -1
                hpccoll.ibcast(comm, buf, root=root, algorithm=algorithm).wait()
                assert np.array_equal(buf, xs[root]), (algorithm, root, run)
                total[...] = -1
                hpccoll.ireduce(comm, xs[r], total, root=root, algorithm=algorithm).wait()
                assert np.array_equal(total, np.sum(xs, axis=0)) if r == root else \
                    (total == -1).all(), (algorithm, root, run)


def applicable_uneven(collective: str, p: int) -> list[str]:
    """The scheduled algorithms of allgather and reduce_scatter that take this test's uneven
    counts at ``p`` ranks (none of the collectives that take no counts)."""
    from hpccoll import registry
    from hpccoll.schedule import Call
    if collective not in ("allgather", "reduce_scatter"):
        return []
    call = Call(collective, p, 0, tuple(2 * k + 1 for k in range(p)))
    return [a.name for a in registry.algorithms(collective) if a.name != "csc" and
            a.violated(call) is None]


@pytest.mark.mpi(ranks=[2, 3], timeout=300)
def test_the_python_executor_runs_where_the_compiled_one_cannot(mpi_ranks, comm,
                                                                monkeypatch):
    """Where the compiled executors cannot run -- an MPI library they do not know (simulated
    by hiding the library's functions) or float16 -- repeated blocking calls and persistent
    requests run on the Python executor (native's persistent requests on the library's own
    persistent collective) with the same results, and what ``hpccoll explain`` prints says
    which executor runs."""
    import hpccoll
    from hpccoll import api
    from hpccoll.requests import NativePersistent
    from hpccoll.runtime import libmpi, scheduled
    p, r = comm.size, comm.rank
    seed = iter(range(10_000))

    def repeat(comm, collective, algorithm, dtype):
        n = 3000
        send = np.empty(send_size(collective, p, n), dtype)
        recv = np.empty(recv_size(collective, p, n), dtype)
        request = getattr(hpccoll, f"{collective}_init")(comm, send, recv, algorithm=algorithm)
        for run in range(3):
            xs = inputs(p, send.size, dtype, next(seed))
            send[...] = xs[r]
            getattr(hpccoll, collective)(comm, send, recv, algorithm=algorithm)
            assert np.array_equal(recv, expected(collective, xs, r, "sum")), \
                (collective, algorithm, dtype, run)
            recv[...] = 0
            request.start()
            request.wait()
            assert np.array_equal(recv, expected(collective, xs, r, "sum")), \
                (collective, algorithm, dtype, run, "persistent")
        last = api._last_calls[collective]
        assert last.executor is None
        # (native's persistent request is the library's own, MPI-4, started from Python)
        assert isinstance(request._executor, NativePersistent) if algorithm == "native" \
            else request._executor is None
        request.free()

    for collective, algorithm in (("allreduce", "ring"), ("alltoall", "bruck")):
        repeat(comm, collective, algorithm, "float16")
    assert "takes no float16" in scheduled.executor("ring", np.dtype("float16"), True)
    monkeypatch.setattr(libmpi, "available", lambda: False)
    unknown = comm.Dup()
    try:
        for collective, algorithm in (("allreduce", "native"), ("allreduce", "ring"),
                                      ("allreduce", "recursive_doubling"),
                                      ("alltoall", "bruck"), ("reduce_scatter", "ring")):
            repeat(unknown, collective, algorithm, "float32")
        assert "does not know" in scheduled.executor("ring", np.dtype("float32"), False)
    finally:
        unknown.Free()


@pytest.mark.mpi(ranks=[1], timeout=300)
def test_counts_beyond_2_31_go_to_mpi4py_and_give_its_results(mpi_ranks, comm):
    """A call of more than 2**31 - 1 elements (C ints cannot pass its count to the compiled
    executor) runs through mpi4py's large-count call instead, first call and repeats alike,
    with ``auto``, native and the drop-in ``Comm``: no OverflowError, the user's values."""
    import hpccoll
    from hpccoll import api
    from mpi4py import MPI
    n = 2**31 + 3
    send = np.empty(n, np.int8)
    send[::4096] = np.arange(send[::4096].size) % 100       # values spread over the buffer
    recv = np.empty(n, np.int8)
    wrapped = hpccoll.Comm(comm)
    calls = {"allreduce": lambda a: hpccoll.allreduce(comm, send, recv, algorithm=a),
             "allgather": lambda a: hpccoll.allgather(comm, send, recv, algorithm=a),
             "reduce": lambda a: hpccoll.reduce(comm, send, recv, root=0, algorithm=a),
             "Allreduce": lambda a: wrapped.Allreduce(send, recv),
             "Allgather": lambda a: wrapped.Allgather([send, MPI.BYTE], [recv, MPI.BYTE])}
    for name, run in calls.items():
        for algorithm in ("native", "auto") if name.islower() else ("auto",):   # Comm: auto
            for turn in range(2):                       # a first call, then a repeat
                recv[::4096] = -1
                recv[-1] = -1
                run(algorithm)
                assert np.array_equal(recv[::4096], send[::4096]) and recv[-1] == send[-1], \
                    (name, algorithm, turn)
        if name.islower():
            assert api._last_calls[name].executor is None, name
    recv[...] = send
    recv[::4096] = 0
    hpccoll.bcast(comm, recv, root=0)                   # 1 rank: the buffer as it is
    assert recv[4096] == 0 and recv[1] == send[1]


COMPILATIONS = """
import gc
import json
import numpy as np
from mpi4py import MPI
import hpccoll
from numba.core.ccallback import CFunc
from numba.core.registry import CPUDispatcher
x, y = np.arange(1000.0), np.empty(1000)
for algorithm in ("native", "recursive_doubling"):
    for _ in range(3):          # (the third call on the C entry's function)
        hpccoll.allreduce(MPI.COMM_WORLD, x, y, algorithm=algorithm)
compiled = [d for d in gc.get_objects() if type(d) in (CPUDispatcher, CFunc)]
names = sorted({d.py_func.__qualname__ for d in compiled if type(d) is CPUDispatcher and
                sum(d.stats.cache_misses.values())})
count = sum(sum(d.stats.cache_misses.values()) if type(d) is CPUDispatcher else
            d.cache_hits == 0 for d in compiled)
every = MPI.COMM_WORLD.gather((names, count))
if MPI.COMM_WORLD.rank == 0:
    print(json.dumps(every))
"""


def test_a_new_process_loads_the_compiled_executors_from_numbas_cache(tmp_path):
    """The compiled executors' code is compiled once and then read from Numba's disk cache by
    every process (a native start that closed over another compiled function once missed it
    and compiled anew in every process: 2.5 s a dtype), and the ranks of a launch that need
    it at the same time compile it once (the cache's lock, kernels.compiling): two launches
    of three ranks on a fresh cache, the first compiles the executors' functions on one rank
    (the others load them), the second compiles nothing."""
    import json
    import os
    import shutil
    import subprocess
    import sys
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path)}
    launches = [json.loads(subprocess.run(
        [shutil.which("mpiexec"), "-n", "3", sys.executable, "-c", COMPILATIONS],
        capture_output=True, text=True, timeout=300, env=env, check=True).stdout.splitlines()[-1])
        for _ in range(2)]
    for executors in ("_post", "_test", "_run"):       # (native, native, scheduled)
        assert sum(executors in names for names, _ in launches[0]) == 1, launches[0]
    assert [count for _, count in launches[1]] == [0, 0, 0], launches[1]
