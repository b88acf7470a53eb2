"""Shared-window (CSC) algorithms without MPI: the verifier's window rules and the planners on
one and several nodes (tests/mpi/test_mpi_csc.py runs them under MPI)."""

from __future__ import annotations

import numpy as np
import pytest

from hpccoll import registry, verify
from hpccoll.schedule import RECV, SEND, SYNC, WINDOW, Call, Copy, Program, Region, Step
from hpccoll.collectives import uniform_call
from hpccoll.topology import Topology, from_spec
from hpccoll.verify import VerificationError

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
    verify.run_in_one_process(calls, _window_programs(True), inputs)
    with pytest.raises(VerificationError, match="reads window element 1, which rank 1 wrote "
                                                "without a sync in between"):
        verify.run_in_one_process(calls, _window_programs(False), inputs)


def test_verifier_requires_every_rank_of_a_node_to_sync():
    calls = [uniform_call("allgather", 2, r, 1) for r in range(2)]
    programs = _window_programs(True)
    programs[1] = Program((programs[1].steps[0], Step(), programs[1].steps[2]), window=2)
    with pytest.raises(VerificationError, match="node 0 syncs, but ranks \\[1\\] do not"):
        verify.run_in_one_process(calls, programs,
                                  verify.random_inputs(calls, np.random.default_rng(0)))


def test_verifier_catches_overwriting_what_another_rank_reads():
    calls = [uniform_call("allgather", 2, r, 1) for r in range(2)]
    programs = []
    for r in range(2):
        write = Step(local=(Copy(Region(SEND, 0, 1), Region(WINDOW, r, 1)),))
        read = Step(local=(Copy(Region(WINDOW, 0, 2), Region(RECV, 0, 2)),))
        again = Step(local=(Copy(Region(SEND, 0, 1), Region(WINDOW, 1 - r, 1)),))
        programs.append(Program((write, SYNC, read, again), window=2))
    with pytest.raises(VerificationError, match="which another rank read without a sync"):
        verify.run_in_one_process(calls, programs,
                                  verify.random_inputs(calls, np.random.default_rng(0)))
