"""Topologies: specs, files and validation (tests/mpi/test_mpi_topology.py: detection)."""

from __future__ import annotations

import json

import pytest

from hpccoll.topology import Topology, from_mapping, from_spec, single_node


def test_spec_nodes():
    t = from_spec("nodes=3,ppn=2")
    assert t.levels == ("node",) and t.regions == ((0, 0, 1, 1, 2, 2),)
    assert t.nodes == ((0, 1), (2, 3), (4, 5)) and t.uniform_nodes() == (3, 2)


def test_spec_racks_and_pods():
    t = from_spec("pods=2,racks_per_pod=2,nodes_per_rack=2,ppn=1")
    assert t.levels == ("node", "rack", "pod")
    assert t.regions[1] == (0, 0, 1, 1, 2, 2, 3, 3)
    assert t.regions[2] == (0, 0, 0, 0, 1, 1, 1, 1)
    assert t.members(2, 1) == (4, 5, 6, 7) and t.count(1) == 4
    assert "2 pod(s) (4 ranks each)" in t.describe()


@pytest.mark.parametrize("spec,message", [
    ("nodes=2", "ppn required"), ("nodes=0,ppn=2", "positive integer"),
    ("nodes=2,ppn=2,colour=3", "keys are"), ("racks=2,nodes_per_rack=2,nodes=5,ppn=1",
                                             "nodes != racks x nodes_per_rack")])
def test_bad_specs_are_refused(spec, message):
    with pytest.raises(ValueError, match=message):
        from_spec(spec)


def test_spec_must_match_the_communicator():
    with pytest.raises(ValueError, match="describes 4 ranks, the communicator has 6"):
        from_spec("nodes=2,ppn=2", 6)


def test_file_with_uneven_racks(tmp_path):
    path = tmp_path / "topo.json"
    path.write_text(json.dumps({"node": ["a", "a", "b", "c", "c", "c"],
                                "rack": ["r1", "r1", "r1", "r2", "r2", "r2"]}))
    t = from_spec(str(path), 6)
    assert t.regions == ((0, 0, 1, 2, 2, 2), (0, 0, 0, 1, 1, 1))
    assert t.uniform_nodes() is None
    assert "ranks per node: [2, 1, 3]" in t.describe()


def test_levels_must_nest():
    with pytest.raises(ValueError, match="levels must nest"):
        Topology.from_levels(node=[0, 0, 1], rack=[0, 1, 1])
    with pytest.raises(ValueError, match="unknown topology levels"):
        from_mapping({"node": [0], "row": [0]})


def test_topology_is_hashable_and_comparable():
    assert hash(from_spec("nodes=2,ppn=2")) == hash(from_spec("nodes=2,ppn=2"))
    assert single_node(3) == Topology(("node",), ((0, 0, 0),))
