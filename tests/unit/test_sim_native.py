"""``native:mpich`` and ``native:openmpi``: the libraries' default selections
(hpccoll/sim/native.py; MPICH's maint/tuning/coll/mpir/generic.json, Open MPI's
coll_tuned_decision_fixed.c), checked at the edges of their rules, and their replay: the
time of the algorithm they select."""

from __future__ import annotations

import pytest

from hpccoll.sim.native import OPENMPI_TABLES, select
from test_sim import simgrid  # noqa: F401 -- the fixture: SimGrid there, or skip/fail


def picked(library, collective, p, nbytes):
    choice = select(f"native:{library}", collective, p, nbytes, 4)
    return choice.chosen, choice.algorithm


@pytest.mark.parametrize("collective, p, nbytes, chosen, algorithm", [
    # allreduce: <= 8 B, or fewer elements than the largest power of two <= p: RD
    ("allreduce", 8, 8, "MPIR_Allreduce_intra_recursive_doubling", "recursive_doubling"),
    ("allreduce", 8, 28, "MPIR_Allreduce_intra_recursive_doubling", "recursive_doubling"),
    ("allreduce", 8, 32, "MPIR_Allreduce_intra_reduce_scatter_allgather", "rabenseifner"),
    ("allreduce", 12, 28, "MPIR_Allreduce_intra_recursive_doubling", "recursive_doubling"),
    ("allreduce", 12, 1 << 20, "MPIR_Allreduce_intra_reduce_scatter_allgather",
     "rabenseifner"),
    # allgather: the whole buffer (block x p) below 512 KiB (power of two) or 80 KiB
    ("allgather", 8, 65535, "MPIR_Allgather_intra_recursive_doubling", "recursive_doubling"),
    ("allgather", 8, 65536, "MPIR_Allgather_intra_ring", "ring"),
    ("allgather", 12, 6826, "MPIR_Allgather_intra_brucks", "bruck"),
    ("allgather", 12, 6827, "MPIR_Allgather_intra_ring", "ring"),
    # alltoall: Bruck <= 256 B from 8 ranks, scattered <= 32 KiB, then pairwise
    ("alltoall", 4, 8, "MPIR_Alltoall_intra_scattered", "direct"),
    ("alltoall", 16, 256, "MPIR_Alltoall_intra_brucks", "bruck"),
    ("alltoall", 16, 260, "MPIR_Alltoall_intra_scattered", "direct"),
    ("alltoall", 16, 32768, "MPIR_Alltoall_intra_scattered", "direct"),
    ("alltoall", 16, 32772, "MPIR_Alltoall_intra_pairwise", "xor"),
    ("alltoall", 12, 65536, "MPIR_Alltoall_intra_pairwise", "pairwise"),
    ("alltoallv", 64, 1 << 20, "MPIR_Alltoallv_intra_scattered", "direct"),
    ("reduce_scatter", 8, 524284, "MPIR_Reduce_scatter_intra_recursive_halving",
     "recursive_halving"),
    ("reduce_scatter", 8, 524288, "MPIR_Reduce_scatter_intra_pairwise", "direct"),
    ("bcast", 4, 1 << 20, "MPIR_Bcast_intra_binomial", "binomial"),
    ("bcast", 16, 12288, "MPIR_Bcast_intra_binomial", "binomial"),
    ("bcast", 16, 12292, "MPIR_Bcast_intra_scatter_recursive_doubling_allgather",
     "scatter_allgather"),
    ("bcast", 12, 1 << 20, "MPIR_Bcast_intra_scatter_ring_allgather", "scatter_allgather"),
    ("reduce", 8, 2048, "MPIR_Reduce_intra_binomial", "binomial"),
    ("reduce", 8, 4096, "MPIR_Reduce_intra_reduce_scatter_gather", "reduce_scatter_gather"),
])
def test_mpich_selection(collective, p, nbytes, chosen, algorithm):
    assert picked("mpich", collective, p, nbytes) == (chosen, algorithm)


@pytest.mark.parametrize("collective, p, nbytes, chosen, algorithm", [
    ("allreduce", 2, 4, "ring", "ring"),
    ("allreduce", 2, 8, "recursive_doubling", "recursive_doubling"),
    ("allreduce", 2, 100000, "segmented_ring", "ring"),
    ("allreduce", 2, 262144, "rabenseifner", "rabenseifner"),
    ("allreduce", 200, 100000, "nonoverlapping", "recursive_doubling"),
    ("allreduce", 200, 200000, "recursive_doubling", "recursive_doubling"),
    ("allreduce", 200, 300000, "rabenseifner", "rabenseifner"),
    ("allreduce", 5000, 2000, "nonoverlapping", "recursive_doubling"),
    ("allreduce", 5000, 3000, "segmented_ring", "ring"),
    ("allreduce", 5000, 10000, "segmented_ring", "ring"),
    ("allreduce", 5000, 20000, "recursive_doubling", "recursive_doubling"),
    ("allreduce", 5000, 40000, "rabenseifner", "rabenseifner"),
    ("alltoall", 64, 1020, "modified_bruck", "bruck"),
    ("alltoall", 64, 1024, "linear", "direct"),
    ("alltoall", 64, 2048, "linear_sync", "direct"),
    ("alltoall", 64, 262144, "pairwise", "pairwise"),
    ("alltoall", 2, 8, "pairwise", "pairwise"),
    ("alltoall", 2, 4096, "pairwise", "pairwise"),
    ("alltoallv", 100, 4096, "pairwise", "pairwise"),
    ("alltoallv", 200, 4096, "basic_linear", "direct"),
    ("allgather", 16, 1 << 20, "recursive_doubling", "recursive_doubling"),
    ("allgather", 12, 1 << 20, "recursive_doubling", "bruck"),     # not a power of two
    ("allgather", 33, 2048, "neighbor_exchange", "ring"),           # odd: Open MPI's ring
    ("allgather", 34, 2048, "neighbor_exchange", "ring"),
    ("allgather", 34, 65536, "ring", "ring"),
    ("reduce_scatter", 2, 65532, "ring", "ring"),
    ("reduce_scatter", 2, 65536, "butterfly", "recursive_halving"),
    ("reduce_scatter", 300, 1000, "recursive_halving", "recursive_halving"),
    ("reduce_scatter", 300, 1024, "butterfly", "recursive_halving"),
])
def test_openmpi_selection(collective, p, nbytes, chosen, algorithm):
    assert picked("openmpi", collective, p, nbytes) == (chosen, algorithm)


def test_stand_ins_say_why_and_odd_neighbour_exchange_is_openmpis_own_ring():
    assert "THROTTLE" in select("native:mpich", "alltoall", 16, 1024, 4).stand_in
    assert select("native:mpich", "alltoall", 16, 1 << 20, 4).stand_in is None    # XOR
    assert select("native:openmpi", "allgather", 33, 2048, 4).stand_in is None
    assert "neighbour exchange" in select("native:openmpi", "allgather", 34, 2048, 4).stand_in


def test_openmpi_tables_are_ordered_and_end_unbounded():
    for rows in OPENMPI_TABLES.values():
        firsts = [first for first, _ in rows]
        assert firsts == sorted(set(firsts)) and firsts[0] == 2
        for _, bounds in rows:
            assert bounds[-1][0] is None
            assert [b for b, _ in bounds[:-1]] == sorted({b for b, _ in bounds[:-1]})


def test_unreplayed_selections_are_refused():
    with pytest.raises(ValueError, match="bcast and reduce pick"):
        select("native:openmpi", "bcast", 8, 1024, 4)
    with pytest.raises(ValueError, match="native:mpich or native:openmpi"):
        select("native:intel", "allreduce", 8, 1024, 4)
    with pytest.raises(ValueError, match="no MPICH selection for allgatherv"):
        select("native:mpich", "allgatherv", 8, 1024, 4)


def test_native_replays_take_the_selected_algorithms_time(simgrid):
    from hpccoll.sim.platform import build
    from hpccoll.tools.simulate import simulated_results
    target = build("torus:dims=4x4")
    sizes = [8, 1 << 10, 1 << 20]
    rows = simulated_results("alltoall", ["native:mpich", "native:openmpi", "bruck", "direct",
                                          "xor", "pairwise"], target, sizes, "float32")
    time = {(r.algorithm, r.bytes): r.time_us for r in rows}
    resolved = {(r.algorithm, r.bytes): r.resolved for r in rows}
    for size in sizes:
        for library in ("native:mpich", "native:openmpi"):
            assert time[library, size] == pytest.approx(time[resolved[library, size], size],
                                                        rel=1e-9), (library, size)
    assert [resolved["native:mpich", s] for s in sizes] == ["bruck", "direct", "xor"]
    assert [resolved["native:openmpi", s] for s in sizes] == ["bruck", "direct", "direct"]
