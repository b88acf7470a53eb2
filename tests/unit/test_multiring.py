"""The multiring family (the TASP paper): allgather, reduce-scatter and allreduce over k
arc-disjoint Hamiltonian cycles, verified without MPI, its step structure, and what the cost
model predicts against the ring."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

import numpy as np
import pytest

from hpccoll import costmodel, registry, verify
from hpccoll.algorithms.multiring import multiring_cycles
from hpccoll.hamiltonian import (arc_multiplicity, decompose, decompose_multinode,
                                 successor_tables)
from hpccoll.schedule import RECV, SEND, Call, Copy, Region
from hpccoll.collectives import uniform_call
from hpccoll.topology import Topology, from_spec

COLLECTIVES = ("allgather", "reduce_scatter", "allreduce")
SHAPES = ("nodes=2,ppn=4", "nodes=2,ppn=8", "nodes=4,ppn=8")
# uneven nodes, and ranks not numbered node by node: both fall back to decompose(p)
IRREGULAR = (Topology.from_levels(node=[0, 0, 0, 1, 1]),
             Topology.from_levels(node=[0, 1, 0, 1, 0, 1]))


def planner(collective: str):
    return registry.get(collective, "multiring").planner


def programs(calls: list[Call]):
    return [planner(c.collective)(c) for c in calls]


def cycles_count(p: int, topology=None) -> int:
    return len(multiring_cycles(uniform_call("allgather", p, 0, 1, topology=topology)))


# ------------------------------------------------------------------------ registration, cycles

def test_registered_for_three_collectives():
    for collective in COLLECTIVES:
        algorithm = registry.get(collective, "multiring")
        assert algorithm.family == "multiring" and algorithm.requires == ()
        assert algorithm.summary.startswith("Multi-ring")
        assert "multiring" in registry.names(collective)


def test_cycle_choice():
    assert multiring_cycles(uniform_call("allgather", 8, 0, 1)) == decompose(8)
    single = from_spec("nodes=1,ppn=8")
    assert multiring_cycles(uniform_call("allgather", 8, 0, 1, topology=single)) == decompose(8)
    for spec, shape in zip(SHAPES, ((2, 4), (2, 8), (4, 8))):
        call = uniform_call("allgather", shape[0] * shape[1], 0, 1, topology=from_spec(spec))
        assert multiring_cycles(call) == decompose_multinode(*shape)
        flat = replace(call, options=(("decomposition", "flat"),))
        assert multiring_cycles(flat) == decompose(call.p)
    for topology in IRREGULAR:
        assert topology.uniform_nodes() is None
        call = uniform_call("allgather", topology.size, 0, 1, topology=topology)
        assert multiring_cycles(call) == decompose(topology.size)
    assert [cycles_count(n) for n in (1, 2, 3, 4, 5, 6, 7, 8)] == [1, 1, 2, 6, 4, 10, 6, 7]
    with pytest.raises(ValueError, match="topology describes 8 ranks, the call has 6"):
        multiring_cycles(uniform_call("allgather", 6, 0, 1, topology=from_spec("nodes=2,ppn=4")))
    with pytest.raises(ValueError, match="decomposition must be"):
        planner("allgather")(uniform_call("allgather", 4, 0, 1,
                                          options=(("decomposition", "ring"),)))


# --------------------------------------------------------------------------- verification

@pytest.mark.parametrize("collective", COLLECTIVES)
def test_verifies_on_one_node(collective):
    """p = 1..9, each kind of decomposition (one ring, Walecki's for odd p, the double covers
    at 4 and 6, the second hub from 8): uniform, uneven with zeros, IN_PLACE where the
    collective has it, then larger blocks, so every cycle carries data and chunks are uneven.
    (test_verify's sweep runs every p = 1..33 and powers of two to 128 with small blocks;
    seed 1 here, 0 there.)"""
    for p in range(1, 10):
        assert verify.check_algorithm(collective, "multiring", p, seed=1)
        k = cycles_count(p)
        assert verify.check_algorithm(collective, "multiring", p, seed=1,
                                      counts=(0, 3 * k + 2))


@pytest.mark.parametrize("collective", COLLECTIVES)
@pytest.mark.parametrize("spec", SHAPES)
def test_verifies_on_node_shapes(collective, spec):
    topology = from_spec(spec)
    ppn = topology.uniform_nodes()[1]
    for counts in ((0, 4), (0, ppn + 3)):
        assert verify.check_algorithm(collective, "multiring", topology.size, topology=topology,
                                      counts=counts)


@pytest.mark.parametrize("collective", COLLECTIVES)
def test_verifies_on_irregular_topologies_and_flat(collective):
    for topology in IRREGULAR:
        assert verify.check_algorithm(collective, "multiring", topology.size, topology=topology,
                                      counts=(0, 12))
    assert verify.check_algorithm(collective, "multiring", 8, topology=from_spec(SHAPES[0]),
                                  counts=(0, 20), options=(("decomposition", "flat"),))


@pytest.mark.parametrize("collective", ("reduce_scatter", "allreduce"))
def test_segments_reduce_as_they_land(collective):
    """segment_bytes = 2 elements: each chunk travels as several messages."""
    options = (("segment_bytes", 16),)
    for p in (2, 3, 4, 5, 8):
        verify.check_algorithm(collective, "multiring", p, counts=(0, 40), options=options)
    verify.check_algorithm(collective, "multiring", 8, counts=(0, 40), options=options,
                           topology=from_spec(SHAPES[0]))
    p, k = 5, cycles_count(5)
    calls = [uniform_call(collective, p, r, 6 * k if collective == "reduce_scatter" else
                          6 * k * p, options=options) for r in range(p)]
    report = verify.check_calls(registry.get(collective, "multiring"), calls,
                                np.random.default_rng(0))
    # each chunk of 6 elements goes as 3 segments of 2
    per_chunk = 3 * (p - 1) * p * k
    assert report.messages == (per_chunk if collective == "reduce_scatter" else
                               per_chunk + (p - 1) * p * k)


# ------------------------------------------------------------------- step structure, report

CASES = [(p, None) for p in (2, 3, 4, 5, 6, 7, 8, 13)] + \
    [(from_spec(s).size, from_spec(s)) for s in SHAPES[:2]]


@pytest.mark.parametrize("collective", COLLECTIVES)
@pytest.mark.parametrize("p,topology", CASES,
                         ids=[str(p) if t is None else t.describe() for p, t in CASES])
def test_rounds_and_concurrent_messages(collective, p, topology):
    """Blocks of k+1 elements: p-1 rounds (2(p-1) for allreduce), each rank posting k
    sends and k receives per round, send c to its successor on cycle c, receive c from its
    predecessor on cycle c; on one node the k sends reach every other rank (twice for
    p = 4, 6), on several nodes k distinct ranks."""
    cycles = multiring_cycles(uniform_call(collective, p, 0, 1, topology=topology))
    k = len(cycles)
    nexts, prevs = successor_tables(cycles)
    count = {"allgather": k + 1, "reduce_scatter": k + 1, "allreduce": (k + 1) * p}
    calls = [uniform_call(collective, p, r, count[collective], topology=topology)
             for r in range(p)]
    report = verify.check_calls(registry.get(collective, "multiring"), calls,
                                np.random.default_rng(p))
    rounds = 2 * (p - 1) if collective == "allreduce" else p - 1
    assert report.rounds == rounds
    assert report.messages == p * k * rounds
    sent_per_rank = {"allgather": (p - 1) * count["allgather"],
                     "reduce_scatter": (p - 1) * count["reduce_scatter"],
                     "allreduce": 2 * (p - 1) * count["allreduce"] // p}[collective]
    assert report.sent == [sent_per_rank] * p
    for rank, program in enumerate(programs(calls)):
        assert len(program.steps) == rounds
        for step in program.steps:
            assert [s.peer for s in step.sends] == [nexts[c][rank] for c in range(k)]
            assert [r.peer for r in step.recvs] == [prevs[c][rank] for c in range(k)]
            peers = Counter(s.peer for s in step.sends)
            if topology is None:
                assert set(peers) == set(range(p)) - {rank}
                assert set(peers.values()) == {arc_multiplicity(p)}
            else:
                assert len(peers) == k


def test_allgather_lands_in_place_without_copies():
    p = 7
    for in_place in (False, True):
        calls = [uniform_call("allgather", p, r, 20, in_place=in_place) for r in range(p)]
        for rank, program in enumerate(programs(calls)):
            assert program.scratch == 0
            for index, step in enumerate(program.steps):
                assert all(r.buffer == RECV and not recv.on_arrival
                           for recv in step.recvs for r in recv.regions)
                want_local = () if in_place or index else \
                    (Copy(Region(SEND, 0, 20), Region(RECV, 20 * rank, 20)),)
                assert step.local == want_local
                sources = {r.buffer for send in step.sends for r in send.regions}
                assert sources == ({SEND} if index == 0 and not in_place else {RECV})


def test_active_cycles_only():
    """One element per block: only cycle 0 carries data, so planning stays O(p) at p = 256."""
    p = 256
    program = planner("allgather")(uniform_call("allgather", p, 3, 1))
    assert len(program.steps) == p - 1
    assert all(len(step.sends) == len(step.recvs) == 1 for step in program.steps)
    assert program.steps[0].sends[0].peer == successor_tables(decompose(p))[0][0][3]


# --------------------------------------------------------------------------- cost model

MIB = 1 << 20


def predicted_ratio(p: int, nbytes: int, machine: str, topology=None) -> float:
    """Predicted ring time / multiring time for an IN_PLACE float32 allgather of ``nbytes``
    per rank."""
    call = uniform_call("allgather", p, 0, nbytes // 4, itemsize=4, topology=topology,
                        in_place=True)
    m = costmodel.MACHINES[machine]
    return costmodel.predict(call, "ring", m) / costmodel.predict(call, "multiring", m)


def test_cost_model_one_h100_node_gains_about_n_minus_1():
    """8 ranks on one NVLink node (``h100``: 64 GB/s per directed link, links in parallel):
    ring 7 steps of (alpha + n/B), multiring 7 steps of (alpha + n/(7B)), both plus the step
    overhead.  The pure-bandwidth ratio is n-1 = 7.  The per-step start-up (alpha 2 us + step
    overhead 5 us = 7 us) is 0.7% of a ring step of 64 MiB (1049 us) but 4.5% of a multiring
    step (150 us), so at 64 MiB per rank the ratio is 6.73, 4% under 7; it tends to 7 as the
    message grows (6.93 at 256 MiB) and falls for small ones (2.5 at 1 MiB)."""
    machine = costmodel.MACHINES["h100"]
    n = 64 * MIB
    per_step = machine.intra.alpha + machine.step_overhead
    bandwidth = machine.intra.bandwidth
    expected = (per_step + n / bandwidth) / (per_step + (n / 7) / bandwidth)
    ratio = predicted_ratio(8, n, "h100")
    assert ratio == pytest.approx(expected, rel=1e-3)
    assert ratio == pytest.approx(7, rel=0.05)
    assert predicted_ratio(8, 256 * MIB, "h100") == pytest.approx(7, rel=0.015)


@pytest.mark.parametrize("machine", ("h100", "h100-slow-ib"))
@pytest.mark.parametrize("spec", ("nodes=2,ppn=8", "nodes=4,ppn=8"))
def test_cost_model_multinode_gain(machine, spec):
    """u nodes x 8: the ring crosses each node boundary on one link per step, the
    topology-aware cycles on 8 (one per rank, one message of n/8 each), so the model's gain
    for large messages approaches 8 (the inter-node links are the bottleneck in both)."""
    topology = from_spec(spec)
    assert 1 < predicted_ratio(topology.size, 64 * MIB, machine, topology) <= 8


def test_cost_model_prefers_topology_aware_cycles():
    """The flat decomposition (``decompose(16)``: 15 cycles, 8 of every rank's 15 messages
    inter-node, queued on one NIC) is predicted slower than the topology-aware one."""
    call = uniform_call("allgather", 16, 0, 16 * MIB, itemsize=4, in_place=True,
                        topology=from_spec("nodes=2,ppn=8"))
    flat = replace(call, options=(("decomposition", "flat"),))
    for machine in ("h100", "h100-slow-ib"):
        m = costmodel.MACHINES[machine]
        assert costmodel.predict(flat, "multiring", m) > costmodel.predict(call, "multiring", m)

