"""Shared-window (CSC) algorithms under real MPI against the native collectives (back-to-back
calls included, which is where a reuse race between one call's reads and the next call's
writes would show)."""

from __future__ import annotations

import numpy as np
import pytest

from hpccoll import registry

from mpi_cases import DTYPES, data, ops_for

COLLECTIVES = ["allgather", "reduce_scatter", "allreduce", "alltoall"]


# ------------------------------------------------------------------------ under real MPI

def _compare(comm, hpccoll_comm, collective, dtype, op, n, name="csc"):
    import hpccoll
    from mpi4py import MPI
    p, r = comm.size, comm.rank
    mpi_op = {"sum": MPI.SUM, "prod": MPI.PROD, "min": MPI.MIN, "max": MPI.MAX}[op]
    if collective == "allgather":
        send, want = data(r, n, dtype, op), np.zeros(n * p, dtype)
        comm.Allgather(send, want)
        got = np.zeros_like(want)
        hpccoll.allgather(hpccoll_comm, send, got, algorithm=name)
    elif collective == "reduce_scatter":
        send, want = data(r, n * p, dtype, op), np.zeros(n, dtype)
        comm.Reduce_scatter_block(send, want, op=mpi_op)
        got = np.zeros_like(want)
        hpccoll.reduce_scatter(hpccoll_comm, send, got, op=op, algorithm=name)
    elif collective == "allreduce":
        send, want = data(r, n, dtype, op), np.zeros(n, dtype)
        comm.Allreduce(send, want, op=mpi_op)
        got = np.zeros_like(want)
        hpccoll.allreduce(hpccoll_comm, send, got, op=op, algorithm=name)
    else:
        send, want = data(r, n * p, dtype, op), np.zeros(n * p, dtype)
        comm.Alltoall(send, want)
        got = np.zeros_like(want)
        hpccoll.alltoall(hpccoll_comm, send, got, algorithm=name)
    assert np.array_equal(got, want), f"{collective} {dtype} {op} n={n}"


@pytest.mark.mpi(ranks=[1, 2, 3, 4], timeout=300)
def test_csc_matches_native(mpi_ranks, comm):
    reducing = ("reduce_scatter", "allreduce")
    for collective in COLLECTIVES:
        for dtype in DTYPES:                      # every dtype, with sum
            for n in [0, 1, 7]:
                _compare(comm, comm, collective, dtype, "sum", n)
        if collective in reducing:                # every op, on a few dtypes
            for dtype in ["float16", "float64", "int32", "uint8", "complex64"]:
                for op in ops_for(dtype):
                    _compare(comm, comm, collective, dtype, op, 300)


@pytest.mark.mpi(ranks=[2, 4], timeout=300)
def test_csc_back_to_back_calls_and_in_place(mpi_ranks, comm):
    """Many calls in a row with changing data and sizes (the window grows), then IN_PLACE."""
    import hpccoll
    from mpi4py import MPI
    p, r = comm.size, comm.rank
    for round_ in range(40):
        n = 1 + (round_ * 37) % 500
        send = data(r, n, "float64", salt=round_)
        want, got = np.zeros(n), np.zeros(n)
        comm.Allreduce(send, want)
        hpccoll.allreduce(comm, send, got, algorithm="csc")
        assert np.array_equal(got, want), round_
        gathered, expected = np.zeros(n * p), np.zeros(n * p)
        comm.Allgather(send, expected)
        hpccoll.allgather(comm, send, gathered, algorithm="csc")
        assert np.array_equal(gathered, expected), round_
    inplace = data(r, 64, "int32").copy()
    want = np.zeros_like(inplace)
    comm.Allreduce(inplace, want)
    hpccoll.allreduce(comm, MPI.IN_PLACE, inplace, algorithm="csc")
    assert np.array_equal(inplace, want)
    blocks = np.zeros(5 * p, "int32")
    blocks[r * 5:(r + 1) * 5] = r + 1
    hpccoll.allgather(comm, MPI.IN_PLACE, blocks, algorithm="csc")
    assert np.array_equal(blocks, np.repeat(np.arange(1, p + 1), 5))


@pytest.mark.mpi(ranks=[4, 6], timeout=300)
def test_csc_hierarchical_on_given_topologies(mpi_ranks, comm):
    """2 x 2, then 2 x 3 and 3 x 2: two and three nodes, two and three ranks a node."""
    import hpccoll
    p = comm.size
    for spec in dict.fromkeys([f"nodes=2,ppn={p // 2}", f"nodes={p // 2},ppn=2"]):
        sub = comm.Dup()
        hpccoll.set_topology(sub, spec)
        for collective in ["allgather", "reduce_scatter", "allreduce"]:
            for dtype in ["float32", "int64", "complex128"]:
                for op in (ops_for(dtype) if collective != "allgather" else ["sum"]):
                    for n in [0, 3, 257]:
                        _compare(comm, sub, collective, dtype, op, n)
        for name in ["direct", "multiring"]:
            if name in registry.names("allreduce"):
                send, want, got = data(comm.rank, 100, "float64"), np.zeros(100), np.zeros(100)
                comm.Allreduce(send, want)
                hpccoll.allreduce(sub, send, got, algorithm="csc", options={"inter": name})
                assert np.array_equal(got, want), (spec, name)
        with pytest.raises(ValueError, match="requires one node"):
            hpccoll.alltoall(sub, np.zeros(p), np.zeros(p), algorithm="csc")
        sub.Free()


@pytest.mark.mpi(ranks=[2], timeout=60)
def test_ranks_that_do_not_share_memory_are_refused(mpi_ranks, comm, monkeypatch):
    """A node whose ranks are not one shared-memory group: every rank raises before any
    window is made (simulated: the shared-memory split is made to put each rank alone)."""
    import hpccoll
    from hpccoll.runtime import window
    sub = comm.Dup()
    hpccoll.set_topology(sub, "nodes=1,ppn=2")
    monkeypatch.setattr(window, "shares_memory", lambda node: node.Get_rank() == 0)
    out = np.full(4, -1.0)
    with pytest.raises(ValueError, match="need the ranks of each node to share memory"):
        hpccoll.allgather(sub, np.zeros(2), out, algorithm="csc")
    assert (out == -1).all()
    monkeypatch.undo()
    hpccoll.allgather(sub, np.full(2, float(comm.rank)), out, algorithm="ring")
    assert np.array_equal(out, [0, 0, 1, 1])
    sub.Free()
