"""Shared-window (CSC) algorithms: the verifier's window rules, the planners on one and
several nodes, and real MPI runs against the native collectives (back-to-back calls
included, which is where a reuse race between one call's reads and the next call's writes
would show)."""

from __future__ import annotations

import numpy as np
import pytest

from hpccoll import registry, verify
from hpccoll.schedule import RECV, SEND, SYNC, WINDOW, Call, Copy, Program, Region, Step
from hpccoll.collectives import uniform_call
from hpccoll.topology import Topology, from_spec
from hpccoll.verify import VerificationError

from mpi_cases import DTYPES, data, ops_for

COLLECTIVES = ["allgather", "reduce_scatter", "allreduce", "alltoall"]
SHAPES = ["nodes=2,ppn=2", "nodes=2,ppn=3", "nodes=3,ppn=2", "nodes=2,ppn=4", "nodes=4,ppn=8",
          "racks=2,nodes_per_rack=2,ppn=2"]


@pytest.mark.parametrize("collective", COLLECTIVES)
def test_csc_verifies_on_one_node(collective):
    assert verify.check_sweep(collective, "csc", max_ranks=33, max_power_of_two=64) > 0


@pytest.mark.parametrize("collective", ["allgather", "reduce_scatter", "allreduce"])
@pytest.mark.parametrize("spec", SHAPES)
def test_csc_verifies_on_several_nodes(collective, spec):
    topology = from_spec(spec)
    inters = [a.name for a in registry.algorithms(collective) if a.name != "csc"]
    for inter in inters:
        call = Call(collective, topology.size, 0, (1,), topology=topology,
                    options=(("inter", inter),))
        if registry.get(collective, inter).violated(
                uniform_call(collective, topology.count(0), 0, 1)) is None:
            assert verify.check_algorithm(collective, "csc", topology.size, topology=topology,
                                          options=call.options)


def test_uneven_nodes_and_their_constraints():
    uneven = Topology.from_levels(node=[0, 0, 0, 1, 1, 2])
    for collective in ["allgather", "reduce_scatter", "allreduce"]:
        assert verify.check_algorithm(collective, "csc", 6, topology=uneven)
    shuffled = Topology.from_levels(node=[0, 1, 0, 1])
    call = uniform_call("allgather", 4, 0, 1, topology=shuffled)
    assert registry.get("allgather", "csc").violated(call) == "ranks numbered node by node"
    call = uniform_call("alltoall", 4, 0, 1, topology=from_spec("nodes=2,ppn=2"))
    assert registry.get("alltoall", "csc").violated(call) == "one node"
    call = uniform_call("allreduce", 4, 0, 1, options=(("inter", "csc"),))
    assert "option inter names another" in registry.get("allreduce", "csc").violated(call)


def _window_programs(reader_syncs: bool) -> list[Program]:
    """Two ranks: each writes its block into the window; rank 1 then reads rank 0's block,
    with or without the sync in between."""
    programs = []
    for r in range(2):
        write = Step(local=(Copy(Region(SEND, 0, 1), Region(WINDOW, r, 1)),))
        read = Step(local=(Copy(Region(WINDOW, 0, 2), Region(RECV, 0, 2)),))
        middle = [SYNC] if reader_syncs else [Step()]
        programs.append(Program((write, *middle, read), window=2))
    return programs


def test_verifier_requires_a_sync_between_window_write_and_read():
    calls = [uniform_call("allgather", 2, r, 1) for r in range(2)]
    inputs = verify.random_inputs(calls, np.random.default_rng(0))
    verify.simulate(calls, _window_programs(True), inputs)
    with pytest.raises(VerificationError, match="reads window element 1, which rank 1 wrote "
                                                "without a sync in between"):
        verify.simulate(calls, _window_programs(False), inputs)


def test_verifier_requires_every_rank_of_a_node_to_sync():
    calls = [uniform_call("allgather", 2, r, 1) for r in range(2)]
    programs = _window_programs(True)
    programs[1] = Program((programs[1].steps[0], Step(), programs[1].steps[2]), window=2)
    with pytest.raises(VerificationError, match="node 0 syncs, but ranks \\[1\\] do not"):
        verify.simulate(calls, programs, verify.random_inputs(calls, np.random.default_rng(0)))


def test_verifier_catches_overwriting_what_another_rank_reads():
    calls = [uniform_call("allgather", 2, r, 1) for r in range(2)]
    programs = []
    for r in range(2):
        write = Step(local=(Copy(Region(SEND, 0, 1), Region(WINDOW, r, 1)),))
        read = Step(local=(Copy(Region(WINDOW, 0, 2), Region(RECV, 0, 2)),))
        again = Step(local=(Copy(Region(SEND, 0, 1), Region(WINDOW, 1 - r, 1)),))
        programs.append(Program((write, SYNC, read, again), window=2))
    with pytest.raises(VerificationError, match="which another rank read without a sync"):
        verify.simulate(calls, programs, verify.random_inputs(calls, np.random.default_rng(0)))


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


@pytest.mark.mpi(ranks=[1, 2, 3, 4, 8], timeout=300)
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


@pytest.mark.mpi(ranks=[4, 6, 8], timeout=300)
def test_csc_hierarchical_on_given_topologies(mpi_ranks, comm):
    import hpccoll
    p = comm.size
    for spec in [f"nodes=2,ppn={p // 2}", f"nodes={p // 2},ppn=2"]:
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
