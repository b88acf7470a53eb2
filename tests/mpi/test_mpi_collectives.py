"""Every registered algorithm against the native MPI collective, under real MPI.

Each test function is one ``mpiexec`` launch per rank count and loops over algorithms,
dtypes, ops, sizes (0 and odd ones included), uneven counts and IN_PLACE.  Inputs are small
integers, so every reduction order gives the exact result and outputs must be equal.  Each
algorithm runs a dtype of every item size and kind and two more in turn (mpi_cases.dtypes_for:
a collective's algorithms run every dtype between them), native every dtype.
"""

from __future__ import annotations

import numpy as np
import pytest

from mpi_cases import DTYPES, check, data, dtypes_for, mpi_op, ops_for, segmented

RANKS = [1, 2, 3, 4]
SIZES = [0, 1, 7, 1000]
OP_DTYPES = ["float16", "float32", "float64", "int8", "int32", "uint8", "complex128"]


def algorithms_for(collective: str, comm) -> list[str]:
    from hpccoll import registry
    from hpccoll.collectives import uniform_call
    call = uniform_call(collective, comm.size, comm.rank, 1)
    return [a.name for a in registry.algorithms(collective) if a.violated(call) is None]


def with_dtypes(collective: str, comm):
    """(algorithm, its dtypes): every algorithm that serves this call, then native."""
    names = algorithms_for(collective, comm)
    return [(name, dtypes_for(i)) for i, name in enumerate(names)] + [("native", DTYPES)]


def cases(dtypes, p, with_ops=False):
    """(dtype, op, count) of a launch at p ranks.  An op takes the same path through a
    schedule at every rank count: every op runs at 2 and 3 ranks, sum and min at 4; at one
    rank, where nothing is sent and the result is the input whatever the op, sum on an empty
    and a non-empty buffer."""
    for dtype in dtypes:
        ops = ops_for(dtype) if with_ops and dtype in OP_DTYPES else ["sum"]
        if p == 1:
            ops = ops[:1]
        elif p > 3:
            ops = [op for op in ops if op in ("sum", "min")]
        for op in ops:
            for n in SIZES if p > 1 else SIZES[::2]:
                yield dtype, op, n


@pytest.mark.mpi(ranks=RANKS, timeout=300)
def test_allgather_matches_native(mpi_ranks, comm):
    import hpccoll
    from mpi4py import MPI
    p, r = comm.size, comm.rank
    for name, dtypes in with_dtypes("allgather", comm):
        for dtype, _, n in cases(dtypes, comm.size):
            send = data(r, n, dtype)
            want = np.zeros(n * p, dtype)
            comm.Allgather(send, want)
            got = np.zeros(n * p, dtype)
            hpccoll.allgather(comm, send, got, algorithm=name)
            check(got, want, f"{name} {dtype} n={n}")
            inplace = np.zeros(n * p, dtype)
            inplace[r * n:(r + 1) * n] = send
            hpccoll.allgather(comm, MPI.IN_PLACE, inplace, algorithm=name)
            check(inplace, want, f"{name} IN_PLACE {dtype} n={n}")
        # uneven blocks (allgatherv), zeros included
        counts = [(3 * i + 1) % 4 for i in range(p)]
        send = data(r, counts[r], "int64")
        want = np.zeros(sum(counts), "int64")
        comm.Allgatherv(send, [want, counts])
        got = np.zeros_like(want)
        hpccoll.allgather(comm, send, got, recvcounts=counts, algorithm=name)
        check(got, want, f"{name} uneven {counts}")


@pytest.mark.mpi(ranks=RANKS, timeout=300)
def test_reduce_scatter_matches_native(mpi_ranks, comm):
    import hpccoll
    p, r = comm.size, comm.rank
    for name, dtypes in with_dtypes("reduce_scatter", comm):
        for dtype, op, n in cases(dtypes, comm.size, with_ops=True):
            send = data(r, n * p, dtype, op)
            want = np.zeros(n, dtype)
            comm.Reduce_scatter_block(send, want, op=mpi_op(op))
            got = np.zeros(n, dtype)
            hpccoll.reduce_scatter(comm, send, got, op=op, algorithm=name)
            check(got, want, f"{name} {dtype} {op} n={n}")
        counts = [(2 * i + 3) % 5 for i in range(p)]
        send = data(r, sum(counts), "float64")
        want = np.zeros(counts[r])
        comm.Reduce_scatter(send, want, counts)
        got = np.zeros(counts[r])
        hpccoll.reduce_scatter(comm, send, got, recvcounts=counts, algorithm=name,
                               options=segmented("reduce_scatter", name, 16))
        check(got, want, f"{name} uneven {counts}, 2-element segments")


@pytest.mark.mpi(ranks=RANKS, timeout=300)
def test_allreduce_matches_native(mpi_ranks, comm):
    import hpccoll
    from mpi4py import MPI
    r = comm.rank
    for name, dtypes in with_dtypes("allreduce", comm):
        for dtype, op, n in cases(dtypes, comm.size, with_ops=True):
            send = data(r, n, dtype, op)
            want = np.zeros(n, dtype)
            comm.Allreduce(send, want, op=mpi_op(op))
            got = np.zeros(n, dtype)
            hpccoll.allreduce(comm, send, got, op=op, algorithm=name)
            check(got, want, f"{name} {dtype} {op} n={n}")
            inplace = send.copy()
            hpccoll.allreduce(comm, MPI.IN_PLACE, inplace, op=mpi_op(op), algorithm=name)
            check(inplace, want, f"{name} IN_PLACE {dtype} {op} n={n}")
        send = data(r, 5000, "float32")
        want = np.zeros_like(send)
        comm.Allreduce(send, want)
        got = np.zeros_like(send)
        hpccoll.allreduce(comm, send, got, algorithm=name,
                          options=segmented("allreduce", name, 1024))
        check(got, want, f"{name} segmented")


# 8 ranks: the mesh on a 2 x 4 grid, xor, hypercube and Bruck in three rounds (5, odd and
# not a power of two, adds no path to 3: Bruck's partial last round, the 1-factor's idle rank)
@pytest.mark.mpi(ranks=RANKS, timeout=300)
def test_alltoall_matches_native(mpi_ranks, comm):
    import hpccoll
    p, r = comm.size, comm.rank
    for name, dtypes in with_dtypes("alltoall", comm):
        for dtype, _, n in cases(dtypes, comm.size):
            send = data(r, n * p, dtype)
            want = np.zeros(n * p, dtype)
            comm.Alltoall(send, want)
            got = np.zeros(n * p, dtype)
            hpccoll.alltoall(comm, send, got, algorithm=name)
            check(got, want, f"{name} {dtype} n={n}")


@pytest.mark.mpi(ranks=RANKS, timeout=300)
def test_alltoallv_matches_native(mpi_ranks, comm):
    import hpccoll
    p, r = comm.size, comm.rank
    matrix = np.array([[(3 * i + 5 * j) % 4 for j in range(p)] for i in range(p)])
    sendcounts, recvcounts = matrix[r].tolist(), matrix[:, r].tolist()
    # gaps and a reversed block order on the receive side
    sdispls = np.cumsum([0] + [c + 1 for c in sendcounts[:-1]]).tolist()
    rdispls, at = [0] * p, 0
    for j in reversed(range(p)):
        rdispls[j] = at
        at += recvcounts[j] + 2
    for name, dtypes in with_dtypes("alltoallv", comm):
        for dtype in dtypes:
            send = data(r, sdispls[-1] + sendcounts[-1], dtype)
            want = np.full(at, 99, dtype)
            comm.Alltoallv([send, (sendcounts, sdispls)], [want, (recvcounts, rdispls)])
            got = np.full(at, 99, dtype)
            hpccoll.alltoallv(comm, [send, sendcounts, sdispls], [got, (recvcounts, rdispls)],
                              algorithm=name)
            check(got, want, f"{name} {dtype}")
    # repeated calls are served from the call cache: same buffers with other counts, other
    # buffers with the same counts, counts as lists, tuples and arrays
    for name in ("auto", "pairwise", "native"):
        for shift in (0, 1, 1, 2, 0):
            counts = [(r + j + shift) % 3 for j in range(p)]
            back = [(j + r + shift) % 3 for j in range(p)]
            send = data(r, 6 * p, "int64", salt=shift)
            want = np.full(6 * p, 7, np.int64)
            comm.Alltoallv([send, counts], [want, back])
            got = np.full(6 * p, 7, np.int64)
            given = (counts, tuple(back)) if shift % 2 else (np.array(counts), back)
            hpccoll.alltoallv(comm, [send, given[0]], [got, given[1]], algorithm=name)
            check(got, want, f"{name} repeated, shift {shift}")


@pytest.mark.mpi(ranks=[2, 4], timeout=120)
def test_nonblocking_and_persistent_forms(mpi_ranks, comm):
    import hpccoll
    p, r = comm.size, comm.rank
    send = data(r, 300, "float64")
    want = np.zeros(300 * p)
    comm.Allgather(send, want)
    for name in algorithms_for("allgather", comm) + ["native"]:
        got = np.zeros(300 * p)
        request = hpccoll.iallgather(comm, send, got, algorithm=name)
        while not request.test():
            pass
        check(got, want, f"iallgather {name}")
        # two non-blocking collectives in flight at once on the same communicator
        got2, total, want_total = np.zeros(300 * p), np.zeros(300), np.zeros(300)
        comm.Allreduce(send, want_total)
        first = hpccoll.iallgather(comm, send, got2, algorithm=name)
        second = hpccoll.iallreduce(comm, send, total, algorithm="ring")
        second.wait()
        first.wait()
        check(got2, want, f"overlapped iallgather {name}")
        check(total, want_total, "overlapped iallreduce")
        reducing = name if name in algorithms_for("allreduce", comm) + ["native"] else "ring"
        persistent = hpccoll.allreduce_init(comm, send, total, algorithm=reducing)
        for _ in range(3):
            total[:] = 0
            persistent.start()
            persistent.wait()
            check(total, want_total, f"persistent allreduce {name}")
        persistent.free()


@pytest.mark.mpi(ranks=[2, 3], timeout=120)
def test_repeated_calls_reuse_and_release_bindings(mpi_ranks, comm):
    """The persistent-request cache must follow the buffers: new arrays at the same sizes,
    arrays freed and reallocated, and views of one array all give right results; a binding
    lives while its arrays do (reused by the next call on them) and is dropped, with its
    scratch, when one of them dies."""
    import gc
    import hpccoll
    from hpccoll.context import existing_context
    p, r = comm.size, comm.rank

    def ring_bindings():
        plans = existing_context(comm).plans.values()
        return [b for plan in plans if plan.label == "allgather/ring"
                for b in plan.bindings.values()]
    for round_ in range(6):
        send = data(r, 50, "int32", salt=round_)
        want = np.zeros(50 * p, "int32")
        comm.Allgather(send, want)
        got = np.zeros(50 * p, "int32")
        for _ in range(2):
            hpccoll.allgather(comm, send, got, algorithm="ring")
            check(got, want, f"round {round_}")
        assert len(ring_bindings()) == 1
        del send, got
        gc.collect()
        assert ring_bindings() == [], round_
    big = np.zeros(100 * p, "int32")
    for offset in (0, 10):
        send = data(r, 40, "int32", salt=offset)
        want = np.zeros(40 * p, "int32")
        comm.Allgather(send, want)
        view = big[offset:offset + 40 * p]
        hpccoll.allgather(comm, send, view, algorithm="direct")
        check(view, want, f"view at {offset}")


@pytest.mark.mpi(ranks=[1, 2, 3, 4], timeout=120)
def test_allgather_stream_yields_data_as_it_arrives(mpi_ranks, comm):
    """Every yielded slice already holds its final data; together they cover the output once;
    the own block comes first, before any transfer completes, then one yield per step."""
    import hpccoll
    p, r = comm.size, comm.rank
    counts = [5 + (i % 3) for i in range(p)]
    send = data(r, counts[r], "float64")
    want = np.zeros(sum(counts))
    comm.Allgatherv(send, [want, counts])
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    for name in algorithms_for("allgather", comm):
        got = np.full(sum(counts), np.nan)
        seen = np.zeros(sum(counts), int)
        yields = 0
        for arrived in hpccoll.allgather_stream(comm, send, got, recvcounts=counts,
                                                algorithm=name):
            if yields == 0 and name in ("ring", "multiring"):
                assert arrived == [(r, slice(starts[r], starts[r] + counts[r]))], arrived
            yields += 1
            for source, where in arrived:
                assert starts[source] <= where.start < where.stop <= starts[source] + counts[source]
                check(got[where], want[where], f"{name}: {where} from {source}")
                seen[where] += 1
        assert (seen == 1).all(), name
        if name == "ring":
            assert yields == p


@pytest.mark.mpi(ranks=[4, 6, 8], timeout=300)
def test_topology_aware_algorithms_on_given_topologies(mpi_ranks, comm):
    """multiring (multi-node cycles), rat (trees over nodes and racks) and csc (hierarchical)
    on communicators whose topology splits this machine into several nodes and racks."""
    import hpccoll
    from mpi4py import MPI
    p, r = comm.size, comm.rank
    specs = {4: ["nodes=2,ppn=2", "racks=2,nodes_per_rack=2,ppn=1"],
             6: ["nodes=2,ppn=3", "nodes=3,ppn=2"],
             8: ["nodes=2,ppn=4", "racks=2,nodes_per_rack=2,ppn=2"]}[p]
    for spec in specs:
        sub = comm.Dup()
        hpccoll.set_topology(sub, spec)
        for n in [0, 5, 301]:
            send = data(r, n, "float64")
            want = np.zeros(n * p)
            comm.Allgather(send, want)
            for name in ["multiring", "csc", "ring"]:
                got = np.zeros(n * p)
                hpccoll.allgather(sub, send, got, algorithm=name)
                check(got, want, f"allgather {name} {spec} n={n}")
            vector = data(r, n * p, "int32")
            total = np.zeros(n * p, "int32")
            comm.Allreduce(vector, total)
            for name in ["multiring", "rat", "csc", "rabenseifner"]:
                got = np.zeros(n * p, "int32")
                hpccoll.allreduce(sub, vector, got, algorithm=name)
                check(got, total, f"allreduce {name} {spec} n={n}")
                inplace = vector.copy()
                takes_segments = name in ("multiring", "rat")     # (the others take none)
                hpccoll.allreduce(sub, MPI.IN_PLACE, inplace, algorithm=name,
                                  options={"segment_bytes": 64} if takes_segments else None)
                check(inplace, total, f"allreduce in place {name} {spec} n={n}")
            block = np.zeros(n, "int32")
            comm.Reduce_scatter_block(vector, block)
            for name in ["multiring", "csc"]:
                got = np.zeros(n, "int32")
                hpccoll.reduce_scatter(sub, vector, got, algorithm=name)
                check(got, block, f"reduce_scatter {name} {spec} n={n}")
        sub.Free()


@pytest.mark.mpi(ranks=[2, 3], timeout=120)
def test_test_then_wait_runs_each_arrival_once(mpi_ranks, comm):
    """test() that completes part of a step, then wait(): each arrival's reduction runs
    once (it ran twice when wait found the whole step complete)."""
    import hpccoll
    r = comm.rank
    for algorithm in ("direct", "ring", "recursive_doubling"):
        for trial in range(20):
            x = np.arange(7, dtype=np.float64) * (r + 1) + trial
            want = np.zeros(7)
            comm.Allreduce(x, want)
            got = np.full(7, 77.0)
            request = hpccoll.iallreduce(comm, x, got, algorithm=algorithm)
            for _ in range(trial % 4):
                request.test()
            request.wait()
            assert np.array_equal(got, want), (algorithm, trial)
