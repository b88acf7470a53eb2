"""Directed Hamiltonian decompositions for multi-ring collectives (TASP-style AllGather).

A set of arc-disjoint directed Hamiltonian cycles lets a multi-ring AllGather drive every
link of an all-to-all topology at once: each cycle is a ring, and no two rings share a link.
A cycle is a tuple of vertices (ranks) ``c``; its arcs are ``c[i] -> c[i+1]`` and
``c[-1] -> c[0]``.  Every cycle returned here is rotated to start at vertex 0.

Single node, ``decompose(n)``: the complete digraph K*_n (every ordered pair is an arc) has
n-1 arc-disjoint Hamiltonian cycles covering all n(n-1) arcs for every n except 4 and 6
(Tillson, 1980).  Constructions, with Z_m the integers mod m and the *zigzag*
``0, 1, -1, 2, -2, ...`` (mod m), whose m-1 steps ``+1, -2, +3, -4, ...`` are all distinct
non-zero residues when m is even, so its m translates split K*_m into m Hamiltonian paths:

* n = 1: ``((0,),)``; n = 2: ``((0, 1),)``, which uses both arcs.
* odd n (Walecki): hub n-1 followed by a translate of the zigzag of Z_{n-1}; translates c and
  c + (n-1)/2 are the two directions of one of Walecki's undirected cycles of K_n.
* even n >= 8 (second hub): start from the n-2 Walecki cycles of K*_{n-1} (hub a = n-2 on
  Z_{n-2}); in each of them replace one arc u -> v by u -> b -> v with the new vertex
  b = n-1.  If the replaced arcs, one per cycle, form a Hamiltonian path H of K*_{n-1} (a
  "rainbow" path: all its arcs lie in different base cycles), then b -> H -> b is the
  (n-1)-th cycle and the arcs at b are covered exactly once.
  - n % 4 == 0, closed form (the one in the TASP reference code, re-derived and checked
    here for every n % 4 == 0 up to 496): with n = 4k + 4, H starts a -> 0 and otherwise
    steps by 2k - 1 (mod 4k + 2), except for three arcs of steps -1, -2, -3 taken from the
    base cycles k+1, 2k+2 and 3k+2.
  - n % 4 == 2 (n >= 10): H is found by a deterministic search (a small constraint solver:
    most-constrained vertex or colour first, forward checking, subtour elimination, seeded
    restarts; ``random.Random`` with fixed seeds), so the result is the same on every run.
* n = 4 and n = 6 have no decomposition; ``decompose`` returns 2(n-1) Hamiltonian cycles
  that cover every arc exactly twice (a cyclic double cover of K_n, each cycle in both
  directions), which still balances every link.  ``arc_multiplicity(n)`` says which.

Every result is checked (``check_cycles(..., complete=True)``) before it is cached
(``functools.lru_cache``); how long decompositions take is in perf/README.md.

Multi-node, ``decompose_multinode(nodes, ranks_per_node)`` (TASP's topology-aware
decomposition; rank = node * ranks_per_node + local index): each cycle runs a Hamiltonian
path inside node 0, crosses one inter-node link to node 1, runs a path there, and so on,
and closes from the last node back to node 0.  The paths come from an arc-disjoint family of
Hamiltonian paths of K*_m (m = ranks_per_node), obtained by deleting one vertex from the
cycles of K*_{m+1}.  Node k + 1 uses, for a given cycle, the path that starts at the local
index where node k's path ended, so inter-node arcs join equal local indices ("rails")
except possibly on the closing arc (all of them do for an even number of nodes and even m).
Each node sends to the next node only; every rank sends over the inter-node network in
exactly one cycle (at most one for m = 3, 5).  Number of cycles, the most possible when
every node is entered once per cycle (each cycle then uses m-1 of the m(m-1) intra-node arcs
of every node, so there are at most m):

* m >= 2, m not 3 or 5: m cycles (K*_m splits into m Hamiltonian paths).
* m = 3: 2 cycles; m = 5: 4 cycles (K*_3 and K*_5 have no split into m Hamiltonian paths;
  one local rank then never sends across nodes).
* m = 1: cycles over the nodes, as many arc-disjoint ones as exist: nodes - 1, but 2 for
  4 nodes and 4 for 6 nodes; nodes = 2 gives the single cycle (0, 1).  Every rank sends
  across nodes in every cycle.
* nodes = 1: ``decompose(ranks_per_node)``.

The module is pure: no MPI, only the standard library and :mod:`hpccoll.rainbow`.
"""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Iterable, Sequence

from .rainbow import rainbow_path

Cycle = tuple[int, ...]

__all__ = ["Cycle", "arc_multiplicity", "decompose", "decompose_multinode", "check_cycles",
           "is_complete", "successor_tables", "inter_node_arcs"]

# Largest family of arc-disjoint Hamiltonian cycles of K*_4 and K*_6 (no decomposition exists):
# one undirected Hamiltonian cycle of K_4, two edge-disjoint ones of K_6, each in both directions.
_DISJOINT_UNDIRECTED = {4: ((0, 1, 2, 3),), 6: ((0, 1, 2, 3, 4, 5), (0, 2, 4, 1, 5, 3))}
# n = 4, 6: the cycles (hub n-1, c + base) for c in Z_{n-1} cover every edge of K_n twice;
# taken in both directions they cover every arc of K*_n twice.
_DOUBLE_COVER_BASE = {4: (0, 1, 2), 6: (0, 1, 3, 4, 2)}



# --------------------------------------------------------------------------------------------
# small helpers

def _rotate_to_zero(cycle: Sequence[int]) -> Cycle:
    """The same cycle, listed from vertex 0."""
    i = list(cycle).index(0)
    return tuple(cycle[i:]) + tuple(cycle[:i])


def _reversed_cycle(cycle: Sequence[int]) -> Cycle:
    return (cycle[0],) + tuple(reversed(cycle[1:]))


def _zigzag(m: int) -> list[int]:
    """0, 1, -1, 2, -2, ... (mod m), m entries."""
    return [((j + 1) // 2 if j % 2 else -(j // 2)) % m for j in range(m)]


def _arcs(cycle: Sequence[int]) -> list[tuple[int, int]]:
    if len(cycle) < 2:
        return []
    return [(cycle[i], cycle[(i + 1) % len(cycle)]) for i in range(len(cycle))]


def _walecki_cycles(n: int) -> list[list[int]]:
    """n-1 cycles decomposing K*_n for odd n >= 3: hub n-1, then a translate of the zigzag."""
    m = n - 1
    zig = _zigzag(m)
    return [[m] + [(c + z) % m for z in zig] for c in range(m)]


# --------------------------------------------------------------------------------------------
# even n >= 8: a second hub inserted into the Walecki cycles of K*_{n-1}

def _rainbow_path_closed_form(n: int) -> list[int]:
    """Rainbow Hamiltonian path of the Walecki cycles of K*_{n-1}, n % 4 == 0, n >= 8.

    Returns the path as a vertex list; it starts at the hub a = n-2.
    """
    k = n // 4 - 1
    m = n - 2  # Z_m, m = 4k + 2
    hub = m
    zig = _zigzag(m)
    # Base cycle i is [hub, i + zig[0], i + zig[1], ...]; from cycle i take the arc that
    # ends at list position p (i.e. list[p-1] -> list[p]).
    special = {0: 1, k + 1: 4 * k + 2, 2 * k + 2: 3, 3 * k + 2: 4 * k}
    next_vertex = {}
    for i in range(m):
        cycle = [hub] + [(i + z) % m for z in zig]
        p = special.get(i, 2 * k)
        next_vertex[cycle[p - 1]] = cycle[p]
    path = [hub]
    while path[-1] in next_vertex and len(path) <= m:
        path.append(next_vertex[path[-1]])
    return path


def _rainbow_path_by_search(base: list[list[int]], n_vertices: int) -> list[int]:
    """A rainbow Hamiltonian path over the base cycles' arcs (:mod:`hpccoll.rainbow`)."""
    colour = [[-1] * n_vertices for _ in range(n_vertices)]
    for c, cycle in enumerate(base):
        for u, v in _arcs(cycle):
            colour[u][v] = c
    return rainbow_path(colour, len(base))


def _arc_owner(cycles: Sequence[Sequence[int]]) -> dict[tuple[int, int], int]:
    """Which cycle each arc belongs to (the cycles must be arc-disjoint)."""
    return {arc: c for c, cycle in enumerate(cycles) for arc in _arcs(cycle)}


def _is_rainbow_path(path: Sequence[int], owner: dict[tuple[int, int], int],
                     n_vertices: int) -> bool:
    if sorted(path) != list(range(n_vertices)):
        return False
    colours = {owner[arc] for arc in zip(path, path[1:])}
    return len(colours) == n_vertices - 1


def _second_hub_cycles(n: int) -> list[list[int]]:
    """n-1 Hamiltonian cycles decomposing K*_n, even n >= 8 (see the module docstring)."""
    base = _walecki_cycles(n - 1)  # on vertices 0..n-2, hub n-2
    owner = _arc_owner(base)
    new_hub = n - 1
    path = _rainbow_path_closed_form(n) if n % 4 == 0 else []
    if not _is_rainbow_path(path, owner, n - 1):
        path = _rainbow_path_by_search(base, n - 1)
    cut_before = {}  # base cycle -> list position p: its arc at p-1 -> p goes through new_hub
    for u, v in zip(path, path[1:]):
        c = owner[(u, v)]
        cut_before[c] = base[c].index(v)
    cycles = []
    for c, cycle in enumerate(base):
        p = cut_before[c]
        cycles.append([new_hub] + cycle[p:] + cycle[:p])
    cycles.append([new_hub] + path)
    return cycles


# --------------------------------------------------------------------------------------------
# public API

def arc_multiplicity(n: int) -> int:
    """How many cycles of ``decompose(n)`` use each arc: 2 for n = 4 and 6, else 1."""
    return 2 if n in (4, 6) else 1


@functools.lru_cache(maxsize=None)
def decompose(n: int) -> tuple[Cycle, ...]:
    """Directed Hamiltonian cycles of the complete digraph on range(n).

    n-1 arc-disjoint cycles covering every arc once, except n = 4 and 6: 2(n-1) cycles
    covering every arc twice (``arc_multiplicity``).  n = 1: ``((0,),)``; n = 2:
    ``((0, 1),)``.  Deterministic and cached; each cycle starts at vertex 0.
    """
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise ValueError(f"decompose needs an integer n >= 1, got {n!r}")
    if n == 1:
        return ((0,),)
    if n == 2:
        return ((0, 1),)
    if n in _DOUBLE_COVER_BASE:
        hub, m = n - 1, n - 1
        raw = []
        for c in range(m):
            cycle = [hub] + [(c + v) % m for v in _DOUBLE_COVER_BASE[n]]
            raw += [cycle, list(_reversed_cycle(cycle))]
    elif n % 2:
        raw = _walecki_cycles(n)
    else:
        raw = _second_hub_cycles(n)
    cycles = tuple(_rotate_to_zero(c) for c in raw)
    check_cycles(cycles, n, arc_multiplicity(n), complete=True)
    return cycles


@functools.lru_cache(maxsize=None)
def _disjoint_cycles(n: int) -> tuple[Cycle, ...]:
    """A largest family of arc-disjoint Hamiltonian cycles of K*_n (n-1, or n-2 for 4 and 6)."""
    if n not in _DISJOINT_UNDIRECTED:
        return decompose(n)
    cycles = []
    for cycle in _DISJOINT_UNDIRECTED[n]:
        cycles += [tuple(cycle), _reversed_cycle(cycle)]
    return tuple(cycles)


@functools.lru_cache(maxsize=None)
def _hamiltonian_paths(m: int) -> tuple[Cycle, ...]:
    """A largest family of arc-disjoint Hamiltonian paths of K*_m (m >= 1).

    Vertex m is deleted from the disjoint cycles of K*_{m+1}: m paths, but m-1 for m = 3, 5.
    """
    if m == 1:
        return ((0,),)
    paths = []
    for cycle in _disjoint_cycles(m + 1):
        i = cycle.index(m)
        paths.append(cycle[i + 1:] + cycle[:i])
    return tuple(paths)


@functools.lru_cache(maxsize=None)
def decompose_multinode(nodes: int, ranks_per_node: int) -> tuple[Cycle, ...]:
    """Topology-aware Hamiltonian cycles over nodes * ranks_per_node ranks.

    Rank r lives on node r // ranks_per_node.  The cycles are arc-disjoint; each enters and
    leaves every node exactly once (a Hamiltonian path inside each node), so it crosses
    between nodes exactly ``nodes`` times.  With ranks_per_node >= 2 every rank sends across
    nodes in at most one cycle (exactly one unless ranks_per_node is 3 or 5).
    Count: ranks_per_node cycles, but 2 for 3 and 4 for 5 ranks per node; with one rank per
    node the arc-disjoint cycles of the node digraph; nodes = 1 gives ``decompose``.
    Deterministic and cached; each cycle starts at rank 0.
    """
    for name, value in (("nodes", nodes), ("ranks_per_node", ranks_per_node)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"decompose_multinode needs an integer {name} >= 1, got {value!r}")
    m = ranks_per_node
    if nodes == 1:
        return decompose(m)
    if m == 1:
        return _disjoint_cycles(nodes)
    paths = _hamiltonian_paths(m)
    # follow[j]: the path that starts where path j ends, so consecutive nodes meet on a rail
    starting_at = {p[0]: j for j, p in enumerate(paths)}
    if set(starting_at) == {p[-1] for p in paths}:
        follow = [starting_at[p[-1]] for p in paths]
    else:
        follow = list(range(len(paths)))
    cycles = []
    for c in range(len(paths)):
        cycle: list[int] = []
        j = c
        for node in range(nodes):
            cycle += [node * m + v for v in paths[j]]
            j = follow[j]
        cycles.append(_rotate_to_zero(cycle))
    result = tuple(cycles)
    check_cycles(result, nodes * m)
    return result


def check_cycles(cycles: Iterable[Sequence[int]], n: int, multiplicity: int = 1,
                 complete: bool = False) -> None:
    """Raise ValueError unless every cycle is a Hamiltonian cycle on range(n) and no arc is
    used more than ``multiplicity`` times; with ``complete``, every arc of K*_n must be used
    exactly ``multiplicity`` times."""
    cycles = [tuple(c) for c in cycles]
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    if multiplicity < 1:
        raise ValueError(f"multiplicity must be >= 1, got {multiplicity}")
    if not cycles:
        raise ValueError("no cycles")
    use: Counter[tuple[int, int]] = Counter()
    for index, cycle in enumerate(cycles):
        try:
            hamiltonian = len(cycle) == n and sorted(cycle) == list(range(n))
        except TypeError:
            hamiltonian = False
        if not hamiltonian:
            raise ValueError(f"cycle {index} {cycle} is not a Hamiltonian cycle on range({n})")
        use.update(_arcs(cycle))
    for arc, count in use.items():
        if count > multiplicity:
            raise ValueError(f"arc {arc[0]} -> {arc[1]} is used by {count} cycles "
                             f"(at most {multiplicity} allowed)")
    if complete:
        missing = [(u, v) for u in range(n) for v in range(n)
                   if u != v and use[(u, v)] != multiplicity]
        if missing:
            u, v = missing[0]
            raise ValueError(f"{len(missing)} arcs are not used exactly {multiplicity} times, "
                             f"e.g. {u} -> {v} is used {use[(u, v)]} times")


def is_complete(cycles: Iterable[Sequence[int]], n: int, multiplicity: int = 1) -> bool:
    """True if the cycles are Hamiltonian on range(n) and use every arc exactly
    ``multiplicity`` times."""
    try:
        check_cycles(cycles, n, multiplicity, complete=True)
    except ValueError:
        return False
    return True


def successor_tables(cycles: Sequence[Sequence[int]]
                     ) -> tuple[tuple[tuple[int, ...], ...], tuple[tuple[int, ...], ...]]:
    """``(next, prev)`` with ``next[c][rank]`` / ``prev[c][rank]`` the rank after / before
    ``rank`` on cycle c (the rank it sends to / receives from on ring c)."""
    nexts, prevs = [], []
    for cycle in cycles:
        size = len(cycle)
        nxt, prv = [0] * size, [0] * size
        for i, rank in enumerate(cycle):
            nxt[rank] = cycle[(i + 1) % size]
            prv[rank] = cycle[i - 1]
        nexts.append(tuple(nxt))
        prevs.append(tuple(prv))
    return tuple(nexts), tuple(prevs)


def inter_node_arcs(cycle: Sequence[int], ranks_per_node: int) -> tuple[tuple[int, int], ...]:
    """The arcs of ``cycle`` that join ranks on different nodes (rank // ranks_per_node)."""
    return tuple((u, v) for u, v in _arcs(cycle) if u // ranks_per_node != v // ranks_per_node)
