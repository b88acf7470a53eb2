"""Zero-copy shared-segment collectives (hpccoll.shared) against the native MPI collectives.

Each MPI test function is one ``mpiexec`` launch per rank count and loops over dtypes, ops,
shapes (empty ones included) and back-to-back runs with changing data.  The reuse check
follows the stated validity rule: after run k a rank writes the next run's input into
``.local`` at once, one rank per iteration dawdles before re-reading, and every rank checks
that run k's ``.result`` is still intact (it must be, until the rank calls run k+1).
Inputs are small integers, so every reduction order gives the exact native result.

Ranks that do not share memory cannot be made on one machine: the detection function is
tested with a fake split result, and the agreement that turns a failed check on one rank
into an error on every rank is tested by making the check fail on one rank (monkeypatch).
"""

from __future__ import annotations

import re
import time

import numpy as np
import pytest

from mpi_cases import DTYPES, data, ops_for

RANKS = [1, 2, 3, 4]            # 8 ranks on one node take no other path: 4 covers them
OP_DTYPES = ["float16", "float32", "float64", "int8", "int32", "uint8", "complex128"]
EDGE_CASES = {("float32", "sum"), ("int8", "prod")}     # every size; the rest n=7
ITERATIONS = 4


def mpi_op(name):
    from mpi4py import MPI
    return {"sum": MPI.SUM, "prod": MPI.PROD, "min": MPI.MIN, "max": MPI.MAX}[name]


def check(got, want, what):
    assert got.dtype == want.dtype and got.shape == want.shape, what
    assert np.array_equal(got, want), f"{what}: got {got.ravel()[:8]}, want {want.ravel()[:8]}"


def gathered(comm, shape, dtype, salt):
    """Native allgather of ``data`` blocks: (p, *shape)."""
    n = int(np.prod(shape))
    want = np.zeros((comm.size, *shape), dtype)
    comm.Allgather(data(comm.rank, n, dtype, salt=salt).reshape(shape), want)
    return want


def reduced(comm, n, dtype, op, salt):
    want = np.zeros(n, dtype)
    comm.Allreduce(data(comm.rank, n, dtype, op, salt=salt), want, op=mpi_op(op))
    return want


def run_and_check_reuse(comm, shared, fill, wants, what):
    """``ITERATIONS`` back-to-back runs: fill(k) writes run k's input into ``.local``; run k
    must give wants[k], still there after every rank wrote run k+1's input."""
    fill(0)
    for k, want in enumerate(wants):
        shared.run()
        check(shared.result, want, f"{what} run {k}")
        if k + 1 < len(wants):
            fill(k + 1)                      # next input, while others may still read run k
        if comm.rank == k % comm.size:
            time.sleep(0.005)                # the slow reader
        check(shared.result, want, f"{what} run {k}, after the next input was written")


@pytest.mark.mpi(ranks=RANKS, timeout=300)
def test_shared_allgather_and_allreduce_match_native(mpi_ranks, comm):
    """One ``mpiexec`` launch per rank count for both classes."""
    check_shared_allgather_matches_native(comm)
    check_shared_allreduce_matches_native(comm)


def check_shared_allgather_matches_native(comm):
    from hpccoll.shared import SharedAllgather
    r = comm.rank
    for dtype in DTYPES:
        for shape in [(0,), (3, 5)] + ([(1,), (1000,)] if dtype == "float32" else []):
            n = int(np.prod(shape))
            wants = [gathered(comm, shape, dtype, k) for k in range(ITERATIONS)]
            with SharedAllgather(comm, shape, dtype) as ag:
                with pytest.raises(RuntimeError, match="before the first run"):
                    ag.result
                assert ag.local.shape == shape and ag.local.flags.writeable

                def fill(k):
                    ag.local[...] = data(r, n, dtype, salt=k).reshape(shape)
                run_and_check_reuse(comm, ag, fill, wants, f"allgather {dtype} {shape}")
                with pytest.raises(ValueError, match="read-only"):
                    ag.result[...] = 0
    # the split form: compute on something else between start() and wait()
    with SharedAllgather(comm, 4, "int64") as ag:
        for k in range(3):
            ag.local[:] = r + 10 * k
            ag.start()
            busy = np.arange(1000).sum()
            ag.wait()
            check(ag.result, np.repeat(np.arange(comm.size) + 10 * k, 4).reshape(-1, 4)
                  .astype("int64"), f"start/wait {k} ({busy})")
        with pytest.raises(RuntimeError, match="without start"):
            ag.wait()
    with pytest.raises(RuntimeError, match="after free"):
        ag.run()
    ag.free()                                # a second free is harmless


def check_shared_allreduce_matches_native(comm):
    from hpccoll.shared import SharedAllreduce
    r = comm.rank
    for dtype in OP_DTYPES:
        for op in ops_for(dtype):
            for n in (0, 1, 7, 1000) if (dtype, op) in EDGE_CASES else (7,):
                wants = [reduced(comm, n, dtype, op, k) for k in range(ITERATIONS)]
                with SharedAllreduce(comm, n, dtype, op=mpi_op(op)) as ar:

                    def fill(k):
                        ar.local[:] = data(r, n, dtype, op, salt=k)
                    run_and_check_reuse(comm, ar, fill, wants, f"allreduce {dtype} {op} n={n}")
    # a 2-D shape and an op given by name
    want = reduced(comm, 24, "float64", "max", 0).reshape(4, 6)
    with SharedAllreduce(comm, (4, 6), "float64", op="max") as ar:
        ar.local[...] = data(r, 24, "float64", "max").reshape(4, 6)
        ar.run()
        check(ar.result, want, "2-D max")
        with pytest.raises(ValueError, match="read-only"):
            ar.result[0, 0] = 1


@pytest.mark.mpi(ranks=[4], timeout=300)
def test_multi_node_given_topology(mpi_ranks, comm):
    """Two even nodes, 3 + 1 ranks and three nodes (2 + 1 + 1: three leaders); on each, every
    inter-node algorithm with one allgather and one allreduce case, the cases taking the
    algorithms in turn from one topology to the next."""
    import hpccoll
    from hpccoll.shared import SharedAllgather, SharedAllreduce
    from hpccoll.topology import Topology
    p, r = comm.size, comm.rank
    topologies = (f"nodes=2,ppn={p // 2}", Topology.from_levels(node=[0] * (p - 1) + [1]),
                  Topology.from_levels(node=[0, 0, 1, 2]))
    inters = ("auto", "native", "ring")
    gathers = (("float32", (5,)), ("int16", (2, 3)), ("complex64", (0,)))
    reductions = (("int32", "sum"), ("float64", "min"), ("uint8", "prod"))
    for t, topology in enumerate(topologies):
        dup = comm.Dup()
        hpccoll.set_topology(dup, topology)
        for i, inter in enumerate(inters):
            dtype, shape = gathers[(i + t) % len(gathers)]
            n = int(np.prod(shape))
            wants = [gathered(comm, shape, dtype, k) for k in range(ITERATIONS)]
            with SharedAllgather(dup, shape, dtype, inter_algorithm=inter) as ag:

                def fill(k):
                    ag.local[...] = data(r, n, dtype, salt=k).reshape(shape)
                run_and_check_reuse(comm, ag, fill, wants, f"{topology} {inter} {dtype}")
            dtype, op = reductions[(i + t) % len(reductions)]
            wants = [reduced(comm, 77, dtype, op, k) for k in range(ITERATIONS)]
            with SharedAllreduce(dup, 77, dtype, op=op, inter_algorithm=inter) as ar:

                def fill(k):
                    ar.local[:] = data(r, 77, dtype, op, salt=k)
                run_and_check_reuse(comm, ar, fill, wants, f"{topology} {inter} {dtype} {op}")
        dup.Free()


def bad_constructions(comm):
    """(description, exception, message pattern, construction) for input bad on every rank."""
    from mpi4py import MPI
    from hpccoll.shared import SharedAllgather, SharedAllreduce
    huge = 1 << 50
    return [
        ("negative shape", ValueError, "negative dimensions",
         lambda: SharedAllgather(comm, (3, -1), "float32")),
        ("shape not ints", TypeError, "block_shape must be an int or a tuple of ints",
         lambda: SharedAllgather(comm, "big", "float32")),
        ("unsupported dtype", TypeError, f"dtype {np.dtype(np.longdouble)} is not supported",
         lambda: SharedAllgather(comm, 4, np.longdouble)),
        ("not a dtype", TypeError, "is not a NumPy dtype",
         lambda: SharedAllreduce(comm, 4, object())),
        ("unknown op", ValueError, r"unsupported reduction op MPI\.MINLOC",
         lambda: SharedAllreduce(comm, 4, "float32", op=MPI.MINLOC)),
        ("logical op on floats", ValueError, "op lor is not defined for floating-point",
         lambda: SharedAllreduce(comm, 4, "float32", op=MPI.LOR)),
        ("max on complex", ValueError, "op max is not defined for complex",
         lambda: SharedAllreduce(comm, 4, "complex64", op="max")),
        ("unknown inter algorithm", ValueError, "unknown algorithm 'bogus' for allgather",
         lambda: SharedAllgather(comm, 4, "float32", inter_algorithm="bogus")),
        ("inter algorithm not a name", TypeError, "inter_algorithm must be an algorithm name",
         lambda: SharedAllreduce(comm, 4, "float32", inter_algorithm=3)),
        ("not a communicator", TypeError, "comm must be an mpi4py intracommunicator",
         lambda: SharedAllgather(None, 4, "float32")),
        ("absurd size", MemoryError, "more than this node's memory",
         lambda: SharedAllgather(comm, (huge,), "float64")),
        ("absurd size", MemoryError, "more than this node's memory",
         lambda: SharedAllreduce(comm, (huge, 4), "float32")),
    ]


@pytest.mark.mpi(ranks=[1, 2, 3], timeout=120)
def test_bad_input_raises_everywhere(mpi_ranks, comm):
    import hpccoll
    from hpccoll.shared import SharedAllgather
    from hpccoll.topology import Topology
    for what, error, pattern, make in bad_constructions(comm):
        with pytest.raises(error, match=pattern) as raised:
            make()
        assert raised.type is error, what
    if comm.size >= 2:
        # a node whose ranks are not numbered consecutively
        dup = comm.Dup()
        hpccoll.set_topology(dup, Topology.from_levels(node=[r % 2 for r in range(comm.size)]))
        if comm.size > 2:
            with pytest.raises(ValueError, match="ranks numbered node by node"):
                SharedAllgather(dup, 4, "float32")
        dup.Free()
    # healthy afterwards
    with SharedAllgather(comm, 2, "float64") as ag:
        ag.local[:] = comm.rank
        ag.run()
        check(ag.result, np.repeat(np.arange(comm.size, dtype=float), 2).reshape(-1, 2), "after")


@pytest.mark.mpi(ranks=[2, 3], timeout=120)
def test_failures_on_one_rank_raise_on_every_rank(mpi_ranks, comm, monkeypatch):
    from mpi4py import MPI
    from hpccoll import shared
    from hpccoll.runtime import window
    # ranks of a "node" that do not share memory: detected on one rank only
    real_check = window.shares_memory
    monkeypatch.setattr(window, "shares_memory",
                        lambda node: real_check(node) and comm.rank != 1)
    with pytest.raises(ValueError, match="do not all share memory"):
        shared.SharedAllgather(comm, 4, "float32")
    with pytest.raises(ValueError, match="do not all share memory"):
        shared.SharedAllreduce(comm, 4, "float32")
    monkeypatch.setattr(window, "shares_memory", real_check)
    # MPI fails to allocate the window on one rank
    real_allocate = window.allocate

    def failing(size, node):
        window = real_allocate(size, node)
        if comm.rank == comm.size - 1:
            raise MPI.Exception(MPI.ERR_NO_MEM)
        return window
    monkeypatch.setattr(window, "allocate", failing)
    with pytest.raises(MemoryError, match="allocating the shared segment"):
        shared.SharedAllgather(comm, 4, "float32")
    monkeypatch.setattr(window, "allocate", real_allocate)
    # a rank that runs alone times out naming the ranks that did not arrive; free() still works
    import hpccoll
    ar = shared.SharedAllreduce(comm, 3, "int64")
    if comm.rank == 0:
        previous = hpccoll.configure(timeout=0.5)
        try:
            with pytest.raises(hpccoll.CollectiveTimeout,
                               match=re.escape(f"rank(s) {list(range(1, comm.size))} did "
                                               "not arrive")):
                ar.run()
        finally:
            hpccoll.configure(**vars(previous))
    ar.free()
    with pytest.raises(RuntimeError, match="after free"):
        ar.local
    with shared.SharedAllreduce(comm, 3, "int64") as ar:       # still healthy
        ar.local[:] = 1
        ar.run()
        check(ar.result, np.full(3, comm.size, np.int64), "after the failures")


class FakeComm:
    """What ``shares_memory`` sees of a node communicator: its size, and the size of the
    shared-memory group its Split_type yields."""

    def __init__(self, size, shared_size):
        self.size, self.shared_size, self.freed = size, shared_size, 0

    def Get_size(self):
        return self.size

    def Get_rank(self):
        return 0

    def Split_type(self, split_type, key=0):
        from mpi4py import MPI
        assert split_type == MPI.COMM_TYPE_SHARED
        return FakeGroup(self)


class FakeGroup:
    def __init__(self, parent):
        self.parent = parent

    def Get_size(self):
        return self.parent.shared_size

    def Free(self):
        self.parent.freed += 1


def test_node_shares_memory_detects_a_split_node():
    from hpccoll.runtime.window import shares_memory
    whole, split = FakeComm(4, 4), FakeComm(4, 2)
    assert shares_memory(whole)
    assert not shares_memory(split)
    assert whole.freed == split.freed == 1


@pytest.mark.parametrize("dtype", DTYPES)
def test_reduce_rows_matches_numpy(dtype):
    """The one-pass multi-source kernel against ``ufunc.reduce`` (in the dtype, so integers
    wrap alike): strided and contiguous rows, into a separate array and into row 0."""
    from hpccoll.runtime import kernels
    for op in ops_for(dtype):
        for p in (1, 2, 3, 5):
            for n in (0, 1, 7, 5000):
                padded = np.random.default_rng(p * n).integers(-3, 4, (p, n + 9)).astype(dtype)
                rows = padded[:, 3:3 + n]
                want = kernels.UFUNCS[op].reduce(rows, axis=0, dtype=dtype)
                got = np.full(n, 99, dtype)
                kernels.reduce_rows(op, got, rows)
                check(got, want, f"{op} p={p} n={n} strided")
                dense = np.ascontiguousarray(rows)
                kernels.reduce_rows(op, dense[0], dense)
                check(dense[0], want, f"{op} p={p} n={n} into row 0")
    with pytest.raises(ValueError, match="at least one row"):
        kernels.reduce_rows("sum", np.zeros(3, dtype), np.zeros((0, 3), dtype))
    with pytest.raises(ValueError, match="dst has shape"):
        kernels.reduce_rows("sum", np.zeros(4, dtype), np.zeros((2, 3), dtype))
