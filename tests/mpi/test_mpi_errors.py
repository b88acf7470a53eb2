"""Bad input raises the same clear error on every rank before any message; check mode
catches arguments that differ by rank.  (A stuck collective and what follows it:
test_mpi_faults.py.)"""

from __future__ import annotations

import re
import time

import numpy as np
import pytest


def bad_calls(comm):
    """(description, exception, message pattern, call, a receive buffer that must stay
    untouched) for input that is bad on every rank."""
    import hpccoll
    from mpi4py import MPI
    p = comm.size
    f32 = np.zeros(4, np.float32)
    out = np.zeros(4 * p, np.float32)
    readonly = np.zeros(4 * p, np.float32)
    readonly.setflags(write=False)
    strided = np.zeros(8 * p, np.float32)[::2]
    cases = [
        ("not an array", TypeError, "sendbuf must be an array .NumPy, a PyTorch tensor",
         lambda: hpccoll.allgather(comm, [1.0, 2.0], out)),
        ("recv not an array", TypeError, "recvbuf must be an array .NumPy, a PyTorch tensor",
         lambda: hpccoll.allreduce(comm, f32, "x")),
        ("dtype mismatch", TypeError, "dtype float64 differs from recvbuf dtype float32",
         lambda: hpccoll.allgather(comm, np.zeros(4), out)),
        ("unsupported dtype", TypeError, f"dtype {np.dtype(np.longdouble)}, which is not "
                                         "supported",
         lambda: hpccoll.allreduce(comm, np.zeros(4, np.longdouble),
                                   np.zeros(4, np.longdouble))),
        ("arithmetic on booleans", ValueError, "op sum is not defined for boolean dtype bool",
         lambda: hpccoll.allreduce(comm, np.zeros(4, bool), np.zeros(4, bool))),
        ("size mismatch", ValueError, "needs recvbuf .* elements, got",
         lambda: hpccoll.allgather(comm, f32, np.zeros(4 * p + 1, np.float32))),
        ("alltoall size", ValueError, "equal size divisible by",
         lambda: hpccoll.alltoall(comm, np.zeros(4 * p, np.float32), out[:4 * p - 1])),
        ("non-contiguous", ValueError, "must be C-contiguous",
         lambda: hpccoll.allgather(comm, f32, strided)),
        ("read-only recvbuf", ValueError, "recvbuf is read-only",
         lambda: hpccoll.allgather(comm, f32, readonly)),
        ("overlap", ValueError, "overlap",
         lambda: hpccoll.allreduce(comm, out, out)),
        ("unknown algorithm", ValueError, "unknown algorithm 'bogus' for allgather; known:",
         lambda: hpccoll.allgather(comm, f32, out, algorithm="bogus")),
        ("unknown op", ValueError, r"unsupported reduction op MPI\.REPLACE",
         lambda: hpccoll.allreduce(comm, f32, np.zeros(4, np.float32), op=MPI.REPLACE)),
        ("logical op on floats", ValueError, "op land is not defined for floating-point dtype",
         lambda: hpccoll.allreduce(comm, f32, np.zeros(4, np.float32), op=MPI.LAND)),
        ("max on complex", ValueError, "op max is not defined for complex",
         lambda: hpccoll.allreduce(comm, np.zeros(4, complex), np.zeros(4, complex), op="max")),
        ("IN_PLACE alltoall", NotImplementedError, "IN_PLACE is supported for",
         lambda: hpccoll.alltoall(comm, MPI.IN_PLACE, out)),
        ("recvcounts length", ValueError, f"recvcounts has {p + 1} entries",
         lambda: hpccoll.reduce_scatter(comm, out, f32, recvcounts=[4] * (p + 1))),
        ("negative counts", ValueError, "negative",
         lambda: hpccoll.alltoallv(comm, [out, [-1] * p], [out, [4] * p])),
        ("alltoallv out of bounds", ValueError, "reach element",
         lambda: hpccoll.alltoallv(comm, [f32, [5] * p], [np.zeros(5 * p, np.float32), [5] * p])),
        ("not a communicator", TypeError, "comm must be an mpi4py intracommunicator",
         lambda: hpccoll.allgather(None, f32, out)),
        ("bad options", TypeError, "options must be a mapping",
         lambda: hpccoll.allreduce(comm, f32, np.zeros(4, np.float32), options=[1])),
        ("freed communicator", TypeError, "comm is MPI.COMM_NULL",
         lambda: hpccoll.allgather(MPI.COMM_NULL, f32, out)),
        ("float counts", TypeError, "recvcounts must be a sequence of .* integers, got",
         lambda: hpccoll.reduce_scatter(comm, out, f32, recvcounts=[4.0] * p)),
        ("algorithm list", TypeError, "algorithm must be a name, got list",
         lambda: hpccoll.allgather(comm, f32, out, algorithm=["ring"])),
        ("predefined op hpccoll lacks", ValueError, r"unsupported reduction op MPI\.MAXLOC",
         lambda: hpccoll.allreduce(comm, f32, np.zeros(4, np.float32), op=MPI.MAXLOC)),
        ("too-long recvbuf", ValueError, "needs recvbuf 4 elements, got recvbuf 5$",
         lambda: hpccoll.allreduce(comm, f32, np.zeros(5, np.float32))),
    ]
    if p > 1:       # one rank runs no ring, so reads no segment size
        cases.append(("bad segment option", ValueError,
                      "algorithm .ring. cannot serve allreduce on .* ranks: it requires "
                      "option segment_bytes is a positive integer",
                      lambda: hpccoll.allreduce(comm, f32, np.zeros(4, np.float32),
                                                algorithm="ring",
                                                options={"segment_bytes": "1M"})))
    return [case + (out,) for case in cases]


# 1 rank (no messages), a power of two and not: every rank checks its own arguments
@pytest.mark.mpi(ranks=[1, 2, 3], timeout=120)
def test_bad_input_raises_everywhere_before_any_message(mpi_ranks, comm):
    import hpccoll
    p, r = comm.size, comm.rank
    for what, error, pattern, call, out in bad_calls(comm):
        out[:] = np.arange(out.size)
        with pytest.raises(error, match=pattern) as raised:
            call()
        assert raised.type is error, what
        assert np.array_equal(out, np.arange(out.size)), f"{what}: recvbuf was written"
    if p & (p - 1):
        # constraints that fail: the algorithms that need a power of two
        for name in ("xor", "hypercube"):
            with pytest.raises(ValueError, match=f"algorithm '{name}' cannot serve alltoall on "
                                                 f"{p} ranks: it requires p is a power of two"):
                hpccoll.alltoall(comm, np.zeros(p), np.zeros(p), algorithm=name)
    # the communicator is still healthy: a good call after all the bad ones
    out = np.zeros(3 * p)
    hpccoll.allgather(comm, np.full(3, float(r)), out, algorithm="ring")
    assert np.array_equal(out, np.repeat(np.arange(p, dtype=float), 3))


@pytest.mark.mpi(ranks=[2, 3], timeout=60)
def test_check_mode_catches_arguments_that_differ_by_rank(mpi_ranks, comm):
    import hpccoll
    p, r = comm.size, comm.rank
    previous = hpccoll.configure(check=True)
    try:
        # rank 0 asks for another algorithm than the others
        with pytest.raises(ValueError, match="HPCCOLL_CHECK: ranks .* called allgather "
                                             "differently"):
            hpccoll.allgather(comm, np.zeros(2), np.zeros(2 * p),
                              algorithm="direct" if r == 0 else "ring")
        # alltoallv counts that do not match between sender and receiver
        send_counts = [1] * p
        recv_counts = [1] * p
        if r == 0:
            recv_counts[p - 1] = 2
        with pytest.raises(ValueError, match="alltoallv counts disagree"):
            hpccoll.alltoallv(comm, [np.zeros(p), send_counts], [np.zeros(p + 1), recv_counts])
        # and agreeing calls pass the check
        out = np.zeros(2 * p)
        hpccoll.allgather(comm, np.full(2, float(r)), out, algorithm="direct")
        assert np.array_equal(out, np.repeat(np.arange(p, dtype=float), 2))
    finally:
        hpccoll.configure(**vars(previous))


def _alltoallv_forms(hpccoll, comm, algorithm):
    """(form, call(send spec, recv spec)) for alltoallv: blocking, non-blocking, persistent
    and the drop-in ``hpccoll.Comm.Alltoallv`` (with ``algorithm``)."""
    def persistent(send, recv):
        request = hpccoll.alltoallv_init(comm, send, recv, algorithm=algorithm)
        try:
            request.start()
            request.wait()
        finally:
            if not request.active:
                request.free()
    return [("blocking", lambda send, recv: hpccoll.alltoallv(comm, send, recv,
                                                              algorithm=algorithm)),
            ("non-blocking", lambda send, recv: hpccoll.ialltoallv(
                comm, send, recv, algorithm=algorithm).wait()),
            ("persistent", persistent),
            ("Comm.Alltoallv", lambda send, recv: hpccoll.Comm(
                comm, {"alltoallv": algorithm}).Alltoallv(send, recv))]


# 1 MiB blocks: rank 1 expects half of what rank 0 sends it (rendezvous-sized messages)
BLOCK = (1 << 20) // 8


def _truncating_counts(p, r):
    recv_counts = [BLOCK] * p
    if r == 1:
        recv_counts[0] = BLOCK // 2
    return [BLOCK] * p, recv_counts


@pytest.mark.mpi(ranks=[3], timeout=180)
def test_alltoallv_counts_that_do_not_match_raise_hpccoll_errors(mpi_ranks, comm):
    """A rank that expects fewer elements than its peer sends: check mode raises ValueError
    on every rank before any message, naming both ranks and counts, for the native and a
    scheduled algorithm in every form; without it, a scheduled algorithm's receive raises
    CollectiveError saying what MPI's truncation means (not the library's bare exception),
    and the communicator is revoked on every rank until recover()."""
    import hpccoll
    from mpi4py import MPI
    p, r = comm.size, comm.rank
    send_counts, recv_counts = _truncating_counts(p, r)
    send = np.full(BLOCK * p, r + 1.0)
    recv = np.full(sum(recv_counts), -1.0)
    previous = hpccoll.configure(check=True)
    try:
        for algorithm in ("native", "pairwise"):
            for form, call in _alltoallv_forms(hpccoll, comm, algorithm):
                with pytest.raises(ValueError) as raised:
                    call([send, send_counts], [recv, recv_counts])
                assert str(raised.value) == (
                    "HPCCOLL_CHECK: alltoallv counts disagree: rank 0 sends 131072 element(s) "
                    "to rank 1, which expects 65536 (recvcounts[0])"), (algorithm, form)
                assert (recv == -1).all(), (algorithm, form)
    finally:
        hpccoll.configure(**vars(previous))
    expected = "a message arrived longer than the receive posted for it|a transfer failed"
    for form, call in _alltoallv_forms(hpccoll, comm, "pairwise"):
        try:
            call([send, send_counts], [recv, recv_counts])
            outcome = None
        except hpccoll.CollectiveError as error:
            outcome = error
        if r == 1:      # the truncated receive
            assert type(outcome) is hpccoll.CollectiveError, (form, outcome)
            assert outcome.error_class in (MPI.ERR_TRUNCATE, MPI.ERR_IN_STATUS), form
            assert re.search(expected, str(outcome)), form
            assert "recvcounts[j] smaller than rank j's sendcounts" in str(outcome), form
        elif outcome is not None:
            assert isinstance(outcome, hpccoll.CommunicatorRevoked), (form, outcome)
            assert re.search(f"revoked by rank 1 after: CollectiveError: ({expected})",
                             str(outcome)), form
        # revoked everywhere: the next call raises before sending (once the notice is here)
        deadline = time.monotonic() + 10
        with pytest.raises(hpccoll.CommunicatorRevoked, match="revoked by rank 1"):
            while time.monotonic() < deadline:
                hpccoll.alltoallv(comm, [send, [BLOCK] * p], [np.zeros(BLOCK * p),
                                                              [BLOCK] * p])
        hpccoll.recover(comm)
    out = np.zeros(BLOCK * p)
    hpccoll.alltoallv(comm, [send, [BLOCK] * p], [out, [BLOCK] * p], algorithm="pairwise")
    assert np.array_equal(out, np.repeat(np.arange(1.0, p + 1), BLOCK))
