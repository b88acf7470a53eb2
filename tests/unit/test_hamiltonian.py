"""Unit tests for hpccoll.hamiltonian (pure functions, no MPI)."""

import os
import subprocess
import sys

import pytest

from hpccoll.hamiltonian import (arc_multiplicity, check_cycles, decompose, decompose_multinode,
                                 inter_node_arcs, is_complete, successor_tables)


def _expected_count(n):
    return 1 if n == 1 else (n - 1) * arc_multiplicity(n)


@pytest.mark.parametrize("n", range(1, 65))
def test_decompose_is_a_complete_decomposition(n):
    cycles = decompose(n)
    assert len(cycles) == _expected_count(n)
    check_cycles(cycles, n, arc_multiplicity(n), complete=True)
    assert is_complete(cycles, n, arc_multiplicity(n))
    assert all(cycle[0] == 0 for cycle in cycles)
    assert all(isinstance(v, int) for cycle in cycles for v in cycle)


def test_small_and_exceptional_cases():
    assert decompose(1) == ((0,),)
    assert decompose(2) == ((0, 1),)
    assert [arc_multiplicity(n) for n in range(1, 9)] == [1, 1, 1, 2, 1, 2, 1, 1]
    for n in (4, 6):
        # no decomposition exists: the double cover is not arc-disjoint, but is balanced
        with pytest.raises(ValueError, match="used by 2 cycles"):
            check_cycles(decompose(n), n)
        assert not is_complete(decompose(n), n)


def test_decompose_is_deterministic_within_a_process():
    # search cases (n % 4 == 2), the closed form (n % 4 == 0) and Walecki (odd n)
    cases = (10, 14, 30, 58, 62, 64, 63)
    before = {n: decompose(n) for n in cases}
    decompose.cache_clear()
    assert {n: decompose(n) for n in cases} == before


def test_decompose_is_deterministic_across_processes():
    """A fresh interpreter (other hash seed) gets the same cycles, without importing MPI."""
    env = dict(os.environ, PYTHONHASHSEED="12345")
    code = ("import sys\n"
            "from hpccoll import hamiltonian as ham\n"
            "print(ham.decompose(30)); print(ham.decompose(46))\n"
            "assert 'mpi4py.MPI' not in sys.modules\n")
    out = subprocess.run([sys.executable, "-c", code], env=env,
                         capture_output=True, text=True, check=True).stdout
    assert out == f"{decompose(30)}\n{decompose(46)}\n"


@pytest.mark.parametrize("bad", [0, -3, 2.0, True, "8"])
def test_decompose_rejects_bad_sizes(bad):
    with pytest.raises(ValueError):
        decompose(bad)


# ---------------------------------------------------------------------------------------------
# multi-node

# (nodes, ranks_per_node) -> number of cycles
MULTINODE_COUNTS = {
    (2, 4): 4, (2, 8): 8, (4, 8): 8, (3, 5): 4, (2, 2): 2, (2, 3): 2, (5, 1): 4, (2, 1): 1,
    (4, 6): 6, (3, 3): 2, (3, 7): 7, (2, 16): 16, (4, 1): 2, (6, 1): 4, (3, 1): 2, (8, 2): 2,
    (3, 4): 4, (5, 9): 9,
}


def _node_blocks(cycle, ranks_per_node):
    """Node ids of the maximal runs of consecutive ranks on one node, read cyclically."""
    nodes = [r // ranks_per_node for r in cycle]
    return [nodes[i] for i in range(len(nodes)) if nodes[i] != nodes[i - 1]] or nodes[:1]


@pytest.mark.parametrize("shape", sorted(MULTINODE_COUNTS))
def test_multinode_decomposition(shape):
    nodes, m = shape
    n = nodes * m
    cycles = decompose_multinode(nodes, m)
    assert len(cycles) == MULTINODE_COUNTS[shape]
    check_cycles(cycles, n)  # Hamiltonian over all ranks and arc-disjoint

    sends_across = [0] * n
    for cycle in cycles:
        # (c) every node is entered once and left once: one block per node, `nodes` crossings
        blocks = _node_blocks(cycle, m)
        assert sorted(blocks) == list(range(nodes))
        crossings = inter_node_arcs(cycle, m)
        assert len(crossings) == nodes
        # (d) at most one inter-node out-arc per rank per cycle
        sources = [u for u, _ in crossings]
        assert len(set(sources)) == len(sources)
        for u in sources:
            sends_across[u] += 1
    if m == 1:
        assert sends_across == [len(cycles)] * n
    else:
        assert max(sends_across) == 1
        if m not in (3, 5):
            assert sends_across == [1] * n  # every rank sends across nodes in exactly one cycle
        else:
            assert sum(sends_across) == nodes * (m - 1)


def _expected_multinode_count(nodes, m):
    if m == 1:
        return {4: 2, 6: 4}.get(nodes, nodes - 1)
    return {3: 2, 5: 4}.get(m, m)


def test_multinode_grid_of_shapes():
    for nodes in range(2, 7):
        for m in range(1, 11):
            cycles = decompose_multinode(nodes, m)
            assert len(cycles) == _expected_multinode_count(nodes, m), (nodes, m)
            check_cycles(cycles, nodes * m)
            for cycle in cycles:
                assert sorted(_node_blocks(cycle, m)) == list(range(nodes))
            if m > 1:
                sources = [u for cycle in cycles for u, _ in inter_node_arcs(cycle, m)]
                assert len(sources) == len(set(sources)) == nodes * len(cycles)


@pytest.mark.parametrize("shape", [(2, 2), (2, 4), (2, 8), (4, 8), (2, 16), (4, 6)])
def test_multinode_links_stay_on_rails(shape):
    """With an even node count and even ranks per node every inter-node arc joins equal
    local indices; in general all but the closing arc (last node -> node 0) do."""
    nodes, m = shape
    for cycle in decompose_multinode(nodes, m):
        for u, v in inter_node_arcs(cycle, m):
            assert u % m == v % m, (u, v)


def test_multinode_paths_inside_nodes_cover_intra_node_arcs():
    nodes, m = 4, 8
    intra = set()
    for cycle in decompose_multinode(nodes, m):
        for i, u in enumerate(cycle):
            v = cycle[(i + 1) % len(cycle)]
            if u // m == v // m:
                intra.add((u, v))
    assert len(intra) == nodes * m * (m - 1)  # every intra-node link is used (once)


@pytest.mark.parametrize("m", [1, 2, 3, 5, 8, 9])
def test_multinode_single_node_is_decompose(m):
    assert decompose_multinode(1, m) == decompose(m)


def test_multinode_is_deterministic():
    first = decompose_multinode(4, 6)
    decompose_multinode.cache_clear()
    decompose.cache_clear()
    assert decompose_multinode(4, 6) == first


@pytest.mark.parametrize("shape", [(0, 4), (2, 0), (-1, 3), (2.0, 4), (2, "4")])
def test_multinode_rejects_bad_shapes(shape):
    with pytest.raises(ValueError):
        decompose_multinode(*shape)


# ---------------------------------------------------------------------------------------------
# checker and tables

def test_check_cycles_rejects_repeated_arc():
    cycles = list(decompose(5))
    cycles[1] = cycles[0]
    with pytest.raises(ValueError, match="used by 2 cycles"):
        check_cycles(cycles, 5)
    check_cycles(cycles, 5, multiplicity=2)  # allowed when asked for
    assert not is_complete(cycles, 5)


def test_check_cycles_rejects_shared_arc_between_different_cycles():
    with pytest.raises(ValueError, match="arc 0 -> 1"):
        check_cycles([(0, 1, 2, 3, 4), (0, 1, 3, 2, 4)], 5)


@pytest.mark.parametrize("broken", [
    (0, 1, 2, 3),           # misses vertex 4
    (0, 1, 2, 3, 3),        # repeats a vertex
    (0, 1, 2, 3, 4, 0),     # too long
    (0, 1, 2, 3, 5),        # vertex out of range
])
def test_check_cycles_rejects_non_hamiltonian_cycle(broken):
    cycles = list(decompose(5))
    cycles[2] = broken
    with pytest.raises(ValueError, match="not a Hamiltonian cycle"):
        check_cycles(cycles, 5)
    assert not is_complete(cycles, 5)


def test_check_cycles_complete_flag():
    cycles = decompose(8)
    check_cycles(cycles[:-1], 8)  # arc-disjoint but not complete
    with pytest.raises(ValueError, match="not used exactly 1 times"):
        check_cycles(cycles[:-1], 8, complete=True)
    assert not is_complete(cycles[:-1], 8)
    assert is_complete(cycles, 8)
    with pytest.raises(ValueError):
        check_cycles([], 3)


def test_successor_tables():
    for cycles in (decompose(1), decompose(2), decompose(7), decompose_multinode(2, 4)):
        nxt, prv = successor_tables(cycles)
        assert len(nxt) == len(prv) == len(cycles)
        for c, cycle in enumerate(cycles):
            for i, rank in enumerate(cycle):
                assert nxt[c][rank] == cycle[(i + 1) % len(cycle)]
                assert prv[c][nxt[c][rank]] == rank
