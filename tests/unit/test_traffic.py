"""The schedule analysis (hpccoll.schedule_analysis: cross-region traffic, dependency chains,
stalled shares), and the RAT paper's Table 1 reproduced with it: PS, ring and RAT on
4 racks x 4 nodes (x 1 or 2 ranks)."""

from __future__ import annotations

import pytest

from hpccoll import registry, schedule_analysis
from hpccoll.schedule import RECV, SEND, Program, Recv, Region, Send, Step
from hpccoll.collectives import uniform_call
from hpccoll.topology import Topology, from_spec


def _chain_programs(p: int) -> list[Program]:
    """A relay 0 -> 1 -> ... -> p-1, one hop a step, one element."""
    progs = []
    for r in range(p):
        steps = [Step() for _ in range(p - 1)]
        if r > 0:
            steps[r - 1] = Step(recvs=(Recv(r - 1, (Region(RECV, 0, 1),)),))
        if r < p - 1:
            steps[r] = Step(sends=(Send(r + 1, (Region(RECV if r else SEND, 0, 1),)),))
        progs.append(Program(tuple(steps)))
    return progs


def test_relay_chain_and_crossings():
    topology = Topology.from_levels(node=[0, 0, 1, 1, 2], rack=[0, 0, 0, 0, 1])
    t = schedule_analysis.analyze(_chain_programs(5), topology, itemsize=4)
    assert (t.messages, t.bytes, t.max_rank_bytes, t.rounds, t.chain) == (4, 16, 4, 4, 4)
    node, rack = t.level("node"), t.level("rack")
    assert node.out == (4, 4, 0) and node.into == (0, 4, 4) and node.total == 8
    assert rack.out == (4, 0) and rack.into == (0, 4) and (rack.max_out, rack.max_in) == (4, 4)
    with pytest.raises(ValueError, match="no level 'pod'"):
        t.level("pod")


def test_concurrent_messages_do_not_chain():
    """Everyone sends to everyone in one step: chain 1, whatever p."""
    p = 5
    def program(r: int) -> Program:
        peers = [q for q in range(p) if q != r]
        return Program((Step(sends=tuple(Send(q, (Region(SEND, 0, 1),)) for q in peers),
                             recvs=tuple(Recv(q, (Region(RECV, q, 1),)) for q in peers)),))
    progs = [program(r) for r in range(p)]
    assert schedule_analysis.dependency_chain(progs) == 1
    assert schedule_analysis.dependency_chain([]) == 0
    assert schedule_analysis.analyze(progs).levels == ()


def test_analysis_refuses_mismatches():
    with pytest.raises(ValueError, match="describes 4 ranks, there are 5 programs"):
        schedule_analysis.analyze(_chain_programs(5), from_spec("nodes=2,ppn=2"))
    calls = [uniform_call("alltoall", 3, r, 1) for r in range(3)]
    with pytest.raises(ValueError, match="cannot serve this call: p is a power of two"):
        schedule_analysis.analyze_algorithm("alltoall", "hypercube", calls)


@pytest.mark.parametrize("p", [2, 3, 6, 9])
def test_ring_chain_grows_with_p(p):
    calls = [uniform_call("allreduce", p, r, 2 * p) for r in range(p)]
    assert schedule_analysis.analyze_algorithm("allreduce", "ring", calls).chain == 2 * (p - 1)
    assert schedule_analysis.analyze_algorithm("allreduce", "ps", calls).chain == 2


# ------------------------------------------------------------------ the RAT paper's Table 1

@pytest.mark.parametrize("ppn", [1, 2])
def test_table_1_cross_rack_traffic_and_chains(ppn):
    """4 racks x 4 nodes x ppn ranks, n = 1600 float64 (p | n).

    Lower bound: G regions of a level (G = 4 racks, 16 nodes) must move every element across
    their boundaries at least 2(G-1) times in all, since each region's input must reach the
    others and the result must reach each of them (an allreduce among the G regions; with
    one-way messages that takes 2(G-1) transfers, the directed gossip bound), so some region
    sends, and some receives, at least 2(G-1)/G n.  RAT meets both exactly, at every level.
    Ring (contiguous racks) sends 2(p-1)/p n through each rack boundary: within
    G/(G-1) of the bound and independent of the ranks per rack; PS sends w = 4 ppn times
    RAT's (its cross-rack traffic grows with the ranks per rack).  Chains: ring 2(p-1),
    PS 2, RAT 2(l+1) with l = 1 oversubscribed level (racks) for ppn = 1 and 2 (nodes and
    racks) for ppn = 2.
    """
    topology = from_spec(f"racks=4,nodes_per_rack=4,ppn={ppn}")
    p, n, itemsize = topology.size, 1600, 8
    vector = n * itemsize                                   # 12800 bytes
    calls = [uniform_call("allreduce", p, r, n, topology=topology) for r in range(p)]
    ps, ring, rat = (schedule_analysis.analyze_algorithm("allreduce", name, calls)
                     for name in ("ps", "ring", "rat"))
    racks, w = 4, 4 * ppn
    bound_total = 2 * (racks - 1) * vector                  # 76800
    bound_region = bound_total // racks                     # 19200

    # RAT: exactly the minimum across racks (in all and per rack, each direction) ...
    assert rat.level("rack").total == bound_total
    assert rat.level("rack").max_out == rat.level("rack").max_in == bound_region
    # ... and across nodes
    assert rat.level("node").total == 2 * (16 - 1) * vector
    # ring: 2(p-1)/p n through each rack boundary, under G/(G-1) times the bound
    assert ring.level("rack").max_out == ring.level("rack").max_in == 2 * (p - 1) * vector // p
    assert ring.level("rack").total == racks * 2 * (p - 1) * vector // p
    assert ring.level("rack").total < racks / (racks - 1) * bound_total
    # PS: w times RAT per rack (2 w (G-1)/G n), growing with the ranks per rack
    assert ps.level("rack").max_out == ps.level("rack").max_in == w * bound_region
    assert ps.level("rack").total == w * bound_total
    assert ps.level("rack").total > ring.level("rack").total > rat.level("rack").total
    # same bytes in all, 2(p-1)/p n per rank, for all three
    assert ps.bytes == ring.bytes == rat.bytes == 2 * (p - 1) * vector
    assert ps.max_rank_bytes == ring.max_rank_bytes == rat.max_rank_bytes == \
        2 * (p - 1) * vector // p

    levels = 1 if ppn == 1 else 2
    assert (ps.chain, ring.chain, rat.chain) == (2, 2 * (p - 1), 2 * (levels + 1))
    assert (ps.rounds, ring.rounds, rat.rounds) == (2, 2 * (p - 1), 2 * (levels + 1))


def test_table_1_numbers():
    """The literal figures for 4 racks x 4 nodes x 1 rank (bytes per rack, each way)."""
    topology = from_spec("racks=4,nodes_per_rack=4,ppn=1")
    calls = [uniform_call("allreduce", 16, r, 1600, topology=topology) for r in range(16)]
    got = {name: schedule_analysis.analyze_algorithm("allreduce", name, calls)
           for name in ("ps", "ring", "rat")}
    assert {k: (t.level("rack").max_out, t.chain) for k, t in got.items()} == \
        {"ps": (76800, 2), "ring": (24000, 30), "rat": (19200, 4)}


def test_rat_chain_stays_flat_as_ring_grows():
    """More nodes per rack: ring's chain grows with p, RAT's stays 2(l+1) = 4."""
    for nodes in (2, 4, 8):
        topology = from_spec(f"racks=2,nodes_per_rack={nodes},ppn=1")
        p = topology.size
        calls = [uniform_call("allreduce", p, r, 2 * p, topology=topology) for r in range(p)]
        assert schedule_analysis.analyze_algorithm("allreduce", "ring", calls).chain == 2 * (p - 1)
        assert schedule_analysis.analyze_algorithm("allreduce", "rat", calls).chain == 4


def test_a_paused_rank_stalls_more_of_the_ring():
    """The RAT paper's straggler: with one rank paused, ring holds up about 3/4 of its bytes, PS
    and RAT about half (the broadcast, which needs every rank's data in any allreduce)."""
    topology = from_spec("racks=4,nodes_per_rack=4,ppn=1")
    calls = [uniform_call("allreduce", 16, r, 1600, topology=topology) for r in range(16)]
    share = {}
    for name in ("ps", "ring", "rat"):
        algorithm = registry.get("allreduce", name)
        programs = [algorithm.planner(call) for call in calls]
        share[name] = max(schedule_analysis.stalled_share(programs, paused)
                          for paused in (0, 5, 15))
    assert share["ring"] > 0.7 and 0.5 < share["ps"] < share["rat"] < 0.6
    assert schedule_analysis.stalled_share(_chain_programs(4), 3) == 0.0
    assert schedule_analysis.stalled_share(_chain_programs(4), 0) == 1.0
