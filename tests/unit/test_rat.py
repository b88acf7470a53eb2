"""RAT, PS and the hypercube reductions on given topologies (no MPI): verified for p = 1..33
on 1, 2 and 4 racks, uneven racks and nodes, pods and interleaved numbering; their round
counts and dependency chains; RAT's pipelined segments and their default size."""

from __future__ import annotations

import numpy as np
import pytest

from hpccoll import registry, schedule_analysis as traffic, verify
from hpccoll.algorithms.rat import _levels, default_segment_bytes
from hpccoll.costmodel import machine_for
from hpccoll.schedule import Call
from hpccoll.collectives import uniform_call
from hpccoll.topology import Topology, from_spec

RANKS = range(1, 34)


def layout(p: int, node_sizes: tuple[int, ...], rack_of_node) -> Topology:
    """Nodes of sizes cycling through ``node_sizes`` (ranks numbered node by node, the last
    node cut short), node k in rack ``rack_of_node(k, nodes)``."""
    node: list[int] = []
    while len(node) < p:
        k = len(set(node))
        node += [k] * node_sizes[k % len(node_sizes)]
    node = node[:p]
    nodes = node[-1] + 1 if node else 0
    return Topology.from_levels(node=node, rack=[rack_of_node(k, nodes) for k in node])


def even_racks(racks: int):
    return lambda k, nodes: k * racks // nodes


TOPOLOGIES = {
    "1rack-4pn": lambda p: layout(p, (4,), even_racks(1)),
    "2racks-2pn": lambda p: layout(p, (2,), even_racks(2)),
    "4racks-1pn": lambda p: layout(p, (1,), even_racks(4)),
    "4racks-uneven-nodes": lambda p: layout(p, (3, 1, 2), even_racks(4)),
    # racks of 1 node, then about half and half of the rest
    "uneven-racks": lambda p: layout(p, (2, 1), lambda k, n: 0 if k == 0 else 1 + (2 * k >= n)),
    "pods": lambda p: Topology.from_levels(node=[r // 2 for r in range(p)],
                                           rack=[r // 4 for r in range(p)],
                                           pod=[r // 8 for r in range(p)]),
    # nodes whose ranks are dealt round robin; racks {node 0, node 1} and {node 2}
    "interleaved": lambda p: Topology.from_levels(node=[r % 3 for r in range(p)],
                                                  rack=[(r % 3) // 2 for r in range(p)]),
    "nodes-only-3pn": lambda p: Topology.from_levels(node=[r // 3 for r in range(p)]),
}


# every p for these; a sample of p for the variations on them
FULL = ("1rack-4pn", "2racks-2pn", "4racks-uneven-nodes", "uneven-racks", "pods")
SAMPLE = (*range(1, 13), 16, 17, 23, 32, 33)


@pytest.mark.parametrize("shape", TOPOLOGIES)
def test_rat_verifies_on_topologies(shape):
    for p in RANKS if shape in FULL else SAMPLE:
        reports = verify.check_algorithm("allreduce", "rat", p, seed=p,
                                         topology=TOPOLOGIES[shape](p))
        assert len(reports) == 4


@pytest.mark.parametrize("shape", ["4racks-uneven-nodes", "uneven-racks", "pods"])
def test_rat_verifies_segmented(shape):
    """Shards cut into segments of 2 elements: several messages per hop, reduced as they land."""
    for p in (1, 2, 5, 12, 17):
        verify.check_algorithm("allreduce", "rat", p, seed=p, counts=(2, 9),
                               topology=TOPOLOGIES[shape](p), options=(("segment_bytes", 16),))


@pytest.mark.parametrize("collective,name", [
    ("allreduce", "ps"), ("allreduce", "recursive_doubling"), ("allgather", "recursive_doubling"),
    ("reduce_scatter", "recursive_halving"), ("allreduce", "rabenseifner")])
def test_other_reductions_verify_on_topologies(collective, name):
    """They ignore the topology; it must not disturb them (test_verify sweeps them without
    one; PS, with its p^2 messages, only at a few sizes here)."""
    for p in (1, 2, 3, 7, 16, 33) if name == "ps" else RANKS:
        verify.check_algorithm(collective, name, p, seed=p,
                               topology=TOPOLOGIES["uneven-racks"](p))


def test_hypercube_reductions_with_large_uneven_counts():
    for p in (3, 5, 6, 7, 12, 13):
        for seed in range(3):
            for collective, name in [("allgather", "recursive_doubling"),
                                     ("reduce_scatter", "recursive_halving"),
                                     ("allreduce", "recursive_doubling"),
                                     ("allreduce", "rabenseifner")]:
                verify.check_algorithm(collective, name, p, seed=seed, counts=(0, 40))


def _run(collective: str, name: str, calls: list[Call]) -> verify.Report:
    return verify.check_calls(registry.get(collective, name), calls, np.random.default_rng(0))


def _allreduce(p: int, n: int, topology=None, **kw) -> list[Call]:
    return [uniform_call("allreduce", p, r, n, topology=topology, **kw) for r in range(p)]


# ------------------------------------------------------------ rounds and dependency chains

@pytest.mark.parametrize("spec,levels", [
    ("nodes=1,ppn=6", 1),                                   # one node: like PS
    ("nodes=6,ppn=1", 1),                                   # one rank per node: like PS
    ("nodes=3,ppn=2", 2),
    ("racks=4,nodes_per_rack=4,ppn=1", 2),                  # the RAT paper's l = 1
    ("racks=1,nodes_per_rack=4,ppn=2", 2),                  # a single rack adds nothing
    ("racks=2,nodes_per_rack=2,ppn=3", 3),
    ("racks=4,nodes_per_rack=1,ppn=2", 2),                  # one node per rack adds nothing
    ("pods=2,racks_per_pod=2,nodes_per_rack=2,ppn=2", 4),
])
@pytest.mark.parametrize("in_place", [False, True])
def test_rat_rounds_and_chain_are_twice_the_levels(spec, levels, in_place):
    """2(l+1) rounds and chain, l + 1 the levels with something to aggregate."""
    topology = from_spec(spec)
    p = topology.size
    calls = _allreduce(p, 5 * p + 3, topology, in_place=in_place)
    assert len(_levels(p, topology).active) == levels
    assert _run("allreduce", "rat", calls).rounds == 2 * levels
    assert traffic.analyze_algorithm("allreduce", "rat", calls).chain == 2 * levels


@pytest.mark.parametrize("p", [1, 2, 3, 5, 8, 13, 32])
def test_round_counts_match_the_docstrings(p):
    pof2 = 1 << (p.bit_length() - 1)
    log, extra = pof2.bit_length() - 1, 2 * (p != pof2)
    assert _run("allreduce", "ps", _allreduce(p, 3 * p)).rounds == 2 * min(1, p - 1)
    assert _run("allreduce", "rat", _allreduce(p, 3 * p)).rounds == 2 * min(1, p - 1)
    assert _run("allreduce", "recursive_doubling", _allreduce(p, 3)).rounds == log + extra
    assert _run("allreduce", "rabenseifner", _allreduce(p, 3 * p)).rounds == 2 * log + extra
    for collective, name in [("allgather", "recursive_doubling"),
                             ("reduce_scatter", "recursive_halving")]:
        calls = [uniform_call(collective, p, r, 3) for r in range(p)]
        assert _run(collective, name, calls).rounds == log + extra
    calls = _allreduce(p, 3 * p)
    chain = traffic.analyze_algorithm("allreduce", "recursive_doubling", calls).chain
    assert chain == log if p == pof2 else log < chain <= log + extra
    assert traffic.analyze_algorithm("allreduce", "ps", calls).chain == 2 * min(1, p - 1)


def test_rat_without_topology_is_ps():
    for p in (1, 4, 7):
        for call in _allreduce(p, 4 * p + 1):
            assert registry.get("allreduce", "rat").planner(call) == \
                registry.get("allreduce", "ps").planner(call)


def test_rat_one_message_per_region_boundary_per_tree():
    """Per tree, 2(G-1) messages cross the boundaries of a level of G regions: each region
    without the root sends one up and receives one down."""
    topology = from_spec("racks=3,nodes_per_rack=2,ppn=2")
    p = topology.size
    programs = [registry.get("allreduce", "rat").planner(c) for c in _allreduce(p, p, topology)]
    for level, groups in ((0, 6), (1, 3)):
        regions = topology.regions[level]
        crossing = sum(regions[r] != regions[send.peer]
                       for r, prog in enumerate(programs) for _, send in prog.messages())
        assert crossing == 2 * (groups - 1) * p


def test_rat_aggregation_is_balanced():
    """Rotating aggregators: with p | n every rank sends and receives 2(p-1)/p n."""
    topology = from_spec("racks=2,nodes_per_rack=3,ppn=4")
    p, n = topology.size, 24 * 10
    report = _run("allreduce", "rat", _allreduce(p, n, topology))
    assert report.sent == [2 * (p - 1) * n // p] * p


def test_rat_refuses_a_topology_of_another_size():
    call = uniform_call("allreduce", 4, 0, 8, topology=from_spec("nodes=3,ppn=2"))
    with pytest.raises(ValueError, match="topology describes 6 ranks, the call has p=4"):
        registry.get("allreduce", "rat").planner(call)


def test_rat_pipelines_segments_through_the_levels():
    """Shards in K segments: 2A + K - 1 rounds, a rack's aggregator sending a segment out of
    the rack in a step where the next one arrives from inside it (host link and uplink busy
    at once: store-and-forward levels use them in different steps), and the cross-rack bytes
    still the minimum, 2(G-1)n for G racks."""
    topology = from_spec("racks=3,nodes_per_rack=2,ppn=1")          # A = 2
    p, segments = topology.size, 5
    calls = _allreduce(p, p * 4 * segments, topology, options=(("segment_bytes", 4 * 8),))
    assert _run("allreduce", "rat", calls).rounds == 2 * 2 + segments - 1
    programs = [registry.get("allreduce", "rat").planner(c) for c in calls]
    rack = topology.regions[1]
    overlapped = [(r, s) for r, prog in enumerate(programs) for s, step in enumerate(prog.steps)
                  if any(rack[x.peer] != rack[r] for x in step.sends)
                  and any(rack[x.peer] == rack[r] for x in step.recvs)]
    assert {s for _, s in overlapped} >= set(range(1, segments))
    crossing = sum(send.count for r, prog in enumerate(programs) for _, send in prog.messages()
                   if rack[send.peer] != rack[r])
    assert crossing == 2 * (3 - 1) * calls[0].counts[0]


def test_rat_default_segments_minimise_the_pipeline_time():
    """By default a small shard is one segment and a large one the K whose pipeline time on
    the cost model's machine, (2A + K - 1)(alpha + S/K beta), is least: no better at K +/- 1."""
    topology = from_spec("racks=2,nodes_per_rack=4,ppn=1")          # A = 2
    p = topology.size
    small = uniform_call("allreduce", p, 0, 16 * p, topology=topology)
    assert default_segment_bytes(small, 2, 16) == 16 * 8
    assert len(registry.get("allreduce", "rat").planner(small).steps) == 4
    shard = (64 << 20) // 8 // p
    big = uniform_call("allreduce", p, 0, shard * p, topology=topology)
    chosen = -(-shard * 8 // default_segment_bytes(big, 2, shard))
    machine = machine_for(big)
    link = machine.inter

    def pipeline(k):
        return (2 * 2 + k - 1) * (link.alpha + machine.step_overhead
                                  + shard * 8 / k / link.bandwidth)
    assert chosen > 1 and pipeline(chosen) <= min(pipeline(chosen - 1), pipeline(chosen + 1))
    assert len(registry.get("allreduce", "rat").planner(big).steps) == 2 * 2 + chosen - 1
