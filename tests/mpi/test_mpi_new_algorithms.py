"""Swing, Bine trees and butterflies, PAT and Bruck's allgather against the native MPI
collectives at 5 and 8 ranks (test_mpi_collectives.py and test_mpi_rooted.py run every
registered algorithm, these included, at 1-4 ranks, under MPICH and Open MPI; 6 and 7 ranks,
no power of two, add no shape that 3 and 5 lack and are verified in one process by
tests/unit/test_verify.py): every dtype, the
ops, sizes 0 and odd ones, IN_PLACE, uneven counts and PAT with messages capped at one block
(options).  The Bine butterflies run at every p (odd ones folding the last rank into its
neighbour), the all-to-all where p is a power of two; Swing's torus form on 2x4 and 2x2x2 at
8 ranks; RAT, pipelined, on a topology of nodes and racks (and at 2-4 ranks on one given
by HPCCOLL_TOPOLOGY); auto, the cost model deciding, on
nodes of 2 ranks (swing's reduce-scatter at 8 ranks)."""

from __future__ import annotations

import numpy as np
import pytest

from mpi_cases import DTYPES, check, data, mpi_op, ops_for

RANKS = [5, 8]
SIZES = [0, 1, 7, 1000]
OP_DTYPES = ["float16", "float64", "int8", "uint32", "complex64"]
# every variant of each algorithm: (name, options)
ALLGATHER = [("bruck", {}), ("pat", {}), ("pat", {"buffer_bytes": 1}), ("swing", {}),
             ("bine", {})]
REDUCE_SCATTER = [("pat", {}), ("pat", {"buffer_bytes": 1}), ("swing", {}), ("bine", {})]
ALLREDUCE = [("swing", {}), ("swing_latency", {}), ("bine", {}), ("swing", {"dims": "2x4"}),
             ("swing", {"dims": "2x2x2"})]


def serves(collective, name, p, options=None):
    """Whether ``name`` serves ``collective`` at p ranks with ``options`` (its declared
    constraints)."""
    from hpccoll import registry
    from hpccoll.collectives import uniform_call
    call = uniform_call(collective, p, 0, 1, options=tuple(sorted((options or {}).items())))
    return registry.get(collective, name).violated(call) is None


def check_rat(comm, sub, cases, label):
    """RAT's allreduce on ``sub`` (a duplicate of ``comm`` with a topology of nodes or
    racks), into a new array and IN_PLACE, against the native allreduce on ``comm``, for
    each (elements, options) of ``cases``."""
    import hpccoll
    from mpi4py import MPI
    for n, options in cases:
        send = data(comm.rank, n, "float64")
        want = np.zeros(n)
        comm.Allreduce(send, want)
        got = np.zeros(n)
        hpccoll.allreduce(sub, send, got, algorithm="rat", options=options)
        check(got, want, f"rat {label} {options} n={n}")
        hpccoll.allreduce(sub, MPI.IN_PLACE, send, algorithm="rat", options=options)
        check(send, want, f"rat IN_PLACE {label} {options} n={n}")


@pytest.mark.mpi(ranks=RANKS, timeout=300)
def test_allgather_and_alltoall_match_native(mpi_ranks, comm):
    import hpccoll
    from mpi4py import MPI
    p, r = comm.size, comm.rank
    for n in SIZES if serves("alltoall", "bine", p) else ():
        send = data(r, n * p, "float64")
        want = np.zeros(n * p)
        comm.Alltoall(send, want)
        got = np.zeros(n * p)
        hpccoll.alltoall(comm, send, got, algorithm="bine")
        check(got, want, f"alltoall bine n={n}")
    for name, options in ALLGATHER:
        if not serves("allgather", name, p):
            continue
        for dtype in DTYPES:
            for n in SIZES:
                send = data(r, n, dtype)
                want = np.zeros(n * p, dtype)
                comm.Allgather(send, want)
                got = np.zeros(n * p, dtype)
                hpccoll.allgather(comm, send, got, algorithm=name, options=options)
                check(got, want, f"{name} {options} {dtype} n={n}")
                inplace = np.zeros(n * p, dtype)
                inplace[r * n:(r + 1) * n] = send
                hpccoll.allgather(comm, MPI.IN_PLACE, inplace, algorithm=name, options=options)
                check(inplace, want, f"{name} {options} IN_PLACE {dtype} n={n}")
        counts = [(3 * i + 1) % 4 for i in range(p)]
        send = data(r, counts[r], "int64")
        want = np.zeros(sum(counts), "int64")
        comm.Allgatherv(send, [want, counts])
        got = np.zeros_like(want)
        hpccoll.allgather(comm, send, got, recvcounts=counts, algorithm=name, options=options)
        check(got, want, f"{name} {options} uneven {counts}")


@pytest.mark.mpi(ranks=RANKS, timeout=300)
def test_reduce_scatter_matches_native(mpi_ranks, comm, monkeypatch):
    import hpccoll
    p, r = comm.size, comm.rank
    # auto with the cost model deciding, on nodes of 2 ranks: at 8 ranks and 8 B it picks
    # swing (test_new_algorithms), which matches native here
    from hpccoll import costmodel, tuning
    from hpccoll.topology import Topology, from_spec
    monkeypatch.setenv("HPCCOLL_TUNING_FILE", "none")
    if p == 8:
        stand_in = costmodel.stand_in("reduce_scatter", p, 8,
                                      topology=from_spec("nodes=4,ppn=2", p))
        assert tuning.choose(stand_in, 8) == "swing"
    sub = comm.Dup()
    hpccoll.set_topology(sub, Topology.from_levels(node=[i // 2 for i in range(p)]))
    for n in (1, 1000):
        send = data(r, n * p, "float32")
        want = np.zeros(n, "float32")
        comm.Reduce_scatter_block(send, want)
        got = np.zeros(n, "float32")
        hpccoll.reduce_scatter(sub, send, got, algorithm="auto")
        check(got, want, f"auto on nodes of 2 n={n}")
    sub.Free()
    monkeypatch.delenv("HPCCOLL_TUNING_FILE")
    for name, options in REDUCE_SCATTER:
        if not serves("reduce_scatter", name, p):
            continue
        for dtype in OP_DTYPES:
            for op in ops_for(dtype):
                for n in SIZES:
                    send = data(r, n * p, dtype, op)
                    want = np.zeros(n, dtype)
                    comm.Reduce_scatter_block(send, want, op=mpi_op(op))
                    got = np.zeros(n, dtype)
                    hpccoll.reduce_scatter(comm, send, got, op=op, algorithm=name,
                                           options=options)
                    check(got, want, f"{name} {options} {dtype} {op} n={n}")
        counts = [(2 * i + 3) % 5 for i in range(p)]
        send = data(r, sum(counts), "float64")
        want = np.zeros(counts[r])
        comm.Reduce_scatter(send, want, counts)
        got = np.zeros(counts[r])
        hpccoll.reduce_scatter(comm, send, got, recvcounts=counts, algorithm=name,
                               options=options)
        check(got, want, f"{name} {options} uneven {counts}")


@pytest.mark.mpi(ranks=RANKS, timeout=300)
def test_allreduce_matches_native(mpi_ranks, comm):
    import hpccoll
    from mpi4py import MPI
    p, r = comm.size, comm.rank
    for name, options in ALLREDUCE:
        if not serves("allreduce", name, p, options):
            continue
        for dtype in OP_DTYPES:
            for op in ops_for(dtype):
                for n in SIZES:
                    send = data(r, n, dtype, op)
                    want = np.zeros(n, dtype)
                    comm.Allreduce(send, want, op=mpi_op(op))
                    got = np.zeros(n, dtype)
                    hpccoll.allreduce(comm, send, got, op=op, algorithm=name, options=options)
                    check(got, want, f"{name} {options} {dtype} {op} n={n}")
                    inplace = send.copy()
                    hpccoll.allreduce(comm, MPI.IN_PLACE, inplace, op=mpi_op(op),
                                      algorithm=name, options=options)
                    check(inplace, want, f"{name} {options} IN_PLACE {dtype} {op} n={n}")
    # RAT pipelined through nodes of 2 and racks of 4 ranks: segments of 8 elements, and the
    # default (several segments a shard for a vector this long)
    from hpccoll.topology import Topology
    sub = comm.Dup()
    hpccoll.set_topology(sub, Topology.from_levels(node=[i // 2 for i in range(p)],
                                                   rack=[i // 4 for i in range(p)]))
    check_rat(comm, sub, [(0, {"segment_bytes": 64}), (1000, {"segment_bytes": 64}),
                          (300_001, {})], "racks of 4")
    # declared options: an unknown name or a value out of range is refused on every rank
    # before any message (the receive buffer stays as it was)
    for name, options, words in [("rat", {"segment_bytes": -4}, "option segment_bytes is a "),
                                 ("bine", {"radix": 2}, "only its options"),
                                 ("ring", {"segment": 64}, "only its options"),
                                 ("multiring", {"decomposition": "ring"},
                                  "option decomposition is "),
                                 ("swing", {"dims": "3x3"}, "option dims is ")]:
        got = np.full(8, 7.0)
        with pytest.raises(ValueError, match=f"algorithm '{name}' .*requires {words}"):
            hpccoll.allreduce(sub, np.ones(8), got, algorithm=name, options=options)
        assert (got == 7.0).all()
    sub.Free()


@pytest.mark.mpi(ranks=[2, 3, 4], timeout=300)
def test_rat_pipelined_on_the_environments_topology(mpi_ranks, comm, monkeypatch):
    """RAT, pipelined, on a topology given by HPCCOLL_TOPOLOGY (read when a communicator is
    first used): one element a segment (a shard in as many segments as it has elements), a
    few elements a segment and the default, against the native allreduce."""
    specs = {2: ["nodes=2,ppn=1"], 3: ["nodes=3,ppn=1"],
             4: ["racks=2,nodes_per_rack=2,ppn=1", "nodes=2,ppn=2"]}[comm.size]
    for spec in specs:
        monkeypatch.setenv("HPCCOLL_TOPOLOGY", spec)
        sub = comm.Dup()
        check_rat(comm, sub, [(0, {"segment_bytes": 8}), (1, {"segment_bytes": 8}),
                              (37, {"segment_bytes": 8}), (1001, {"segment_bytes": 40}),
                              (200_003, {})], spec)
        sub.Free()


@pytest.mark.mpi(ranks=RANKS, timeout=300)
def test_bine_bcast_and_reduce_match_native(mpi_ranks, comm):
    import hpccoll
    from mpi4py import MPI
    p, r = comm.size, comm.rank
    for root in range(p):
        for dtype in ["float64", "int8", "complex128"]:
            for n in SIZES:
                want = data(root, n, dtype)
                got = want.copy() if r == root else np.zeros(n, dtype)
                hpccoll.bcast(comm, got, root=root, algorithm="bine")
                check(got, want, f"bcast root {root} {dtype} n={n}")
                for op in ops_for(dtype):
                    send = data(r, n, dtype, op)
                    want = np.zeros(n, dtype)
                    comm.Reduce(send, want, op=mpi_op(op), root=root)
                    got = np.full(n, 99, dtype)
                    hpccoll.reduce(comm, send, got if r == root else None, op=op, root=root,
                                   algorithm="bine")
                    if r == root:
                        check(got, want, f"reduce root {root} {dtype} {op} n={n}")
        send = data(r, 5000, "int64")
        want = np.zeros_like(send)
        comm.Reduce(send, want, root=root)
        mine = send.copy()
        hpccoll.reduce(comm, MPI.IN_PLACE if r == root else send, mine, root=root,
                       algorithm="bine")
        check(mine, want if r == root else send, f"reduce IN_PLACE root {root}")
