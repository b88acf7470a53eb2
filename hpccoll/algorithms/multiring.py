"""Multi-ring algorithms (the TASP paper): the ring algorithms run on k arc-disjoint directed
Hamiltonian cycles at once, chunk c of every block travelling cycle c.

Each block (one rank's contribution or result) is cut into k chunks with ``even_split`` (so
blocks of any size work, uneven and smaller than k included); cycle c is an ordinary ring,
in cycle order instead of rank order, and carries chunk c of every block.  Step s of every
cycle runs in the same step, so a rank posts k sends to its k successors and k receives from
its k predecessors together; the cycles share no arc, so on an all-to-all topology (NVSwitch,
Infinity Fabric) every directed link carries one message per step instead of one link of
the ring carrying all of them.  Chunks with no elements (blocks smaller than k) are skipped
on both sides, and cycles whose chunks are all empty are not planned at all, so planning
costs O(p x cycles in use) per rank.

The cycles (``multiring_cycles``), ranks numbered as in the communicator:

* ``call.topology`` with more than one node and ``uniform_nodes()`` (equal nodes, ranks
  numbered node by node): ``decompose_multinode(nodes, ranks_per_node)`` (TASP's
  topology-aware decomposition): k = ranks per node cycles (2 for 3, 4 for 5 ranks per
  node), each a Hamiltonian path inside every node joined by inter-node links, so every
  rank sends over the inter-node network in one of its k messages per step (at most one).
* otherwise -- one node, no topology, or an irregular one (uneven nodes, ranks not numbered
  node by node): ``decompose(p)``, the cycles of the complete digraph, ignoring nodes:
  k = p-1 cycles, each arc used once, except p = 4 and 6: k = 2(p-1) cycles, each arc used
  twice (two messages per step go to each successor, posted in cycle order on both sides).
  Option ``decomposition="flat"`` asks for these on any topology (TASP's naive multi-node
  decomposition: each rank then sends about half its messages across nodes every step).

Cost notation as in :mod:`hpccoll.algorithms.ring` (alpha per message, beta per byte of one
link, gamma per byte reduced, n the block or vector bytes), with k the number of cycles.
The k-fold gain of the bandwidth term assumes each directed link has a bandwidth of its own
(a full mesh); where a rank's messages share one port the time is the ring's plus
(k-1)(p-1) alpha.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Callable, Sequence

from ..hamiltonian import Cycle, decompose, decompose_multinode
from ..registry import Cost, Option, register
from ..schedule import (SCRATCH, Call, Program, Region, allgather_blocks, allgather_from_input,
                        blocks, even_part, one_rank, parallel, reduce_scatter_blocks, relabel,
                        segment_count, sequence, vector_blocks)
from .ring import SEGMENTS, ring_allgather, ring_reduce_scatter

DECOMPOSITION = Option("decomposition", "'topology' or 'flat'", "'topology'",
                       "the Hamiltonian cycles: by nodes where the topology has equal nodes "
                       "numbered node by node, or decompose(p) on any topology (TASP's naive "
                       "multi-node decomposition)", lambda value: value in ("topology", "flat"))


def multiring_cycles(call: Call) -> tuple[Cycle, ...]:
    """The Hamiltonian cycles the multiring planners use for ``call`` (see the module
    docstring): topology-aware for equal nodes numbered node by node, else ``decompose(p)``.
    Option ``decomposition="flat"`` forces ``decompose(p)`` (TASP's naive multi-node
    decomposition, for comparison)."""
    how = call.option("decomposition", "topology")
    if how not in ("topology", "flat"):
        raise ValueError(f"multiring option decomposition must be 'topology' or 'flat', "
                         f"got {how!r}")
    topology = call.topology
    if how == "topology" and topology is not None and topology.count(0) > 1:
        if topology.size != call.p:
            raise ValueError(f"the topology describes {topology.size} ranks, the call has "
                             f"{call.p}")
        shape = topology.uniform_nodes()
        if shape is not None:
            return decompose_multinode(*shape)
    return decompose(call.p)


def _chunk(block: Region, k: int, c: int) -> Region:
    """Chunk c of ``block`` cut into k chunks by ``even_part`` (larger ones first)."""
    return block.sub(*even_part(block.count, k, c))


def _cycles_in_use(k: int, largest_block: int) -> int:
    """Cycles 0..result-1 carry data: chunk c of a block is empty iff the block has <= c
    elements."""
    return min(k, largest_block)


def _on_cycles(cycles: Sequence[Cycle], ring: Callable[[int, Cycle], Program]) -> Program:
    """``ring(c, cycle)``, a ring planned in positions along ``cycle``, on every cycle c of
    ``cycles``, all in the same steps; sends and receives go in cycle order (so two messages on one
    arc, p = 4 and 6, match in posting order)."""
    return parallel(*(relabel(ring(c, cycle), cycle) for c, cycle in enumerate(cycles)))


def _multiring_allgather(p: int, rank: int, cycles: Sequence[Cycle],
                         result: list[Region]) -> Program:
    """p-1 steps; in each, chunk c of a block moves one hop along cycle c, for every c."""
    k = len(cycles)

    def ring(c: int, cycle: Cycle) -> Program:
        return ring_allgather(p, cycle.index(rank), [_chunk(result[v], k, c) for v in cycle])
    return _on_cycles(cycles[:_cycles_in_use(k, max(b.count for b in result))], ring)


# (cycle c, chunks of the source blocks in cycle order) -> (staging, partial) of
# ring_reduce_scatter for that cycle, functions of (step, position along the cycle)
CycleTables = Callable[[int, Cycle, list[Region]],
                       tuple[Callable[[int, int], Region], Callable[[int, int], Region]]]


def _multiring_reduce_scatter(p: int, rank: int, cycles: Sequence[Cycle], segment: int,
                              source: list[Region], largest_block: int,
                              tables: CycleTables) -> Program:
    """The ring reduce-scatter of chunk c of every block on cycle c, all cycles in the same
    p-1 steps; ``tables`` gives each cycle's staging and partial-sum regions.  Afterwards
    cycle c's ``partial(p-2, position of rank)`` holds the reduced chunk c of this rank's
    block, for every c."""
    k = len(cycles)

    def ring(c: int, cycle: Cycle) -> Program:
        chunks = [_chunk(source[v], k, c) for v in cycle]
        staging, partial = tables(c, cycle, chunks)
        return ring_reduce_scatter(p, cycle.index(rank), chunks, staging, partial, segment)
    return _on_cycles(cycles[:_cycles_in_use(k, largest_block)], ring)


def _landing(area: Region, k: int, c: int, chunks: list[Region]) -> list[Region]:
    """Cycle c's part of a scratch ``area`` as wide as the largest block, one region per
    chunk in ``chunks`` (chunk c of a block is never larger than the largest block's, so the
    parts of different cycles never overlap)."""
    at = _chunk(area, k, c).offset
    return [Region(area.buffer, at, chunk.count) for chunk in chunks]


@register("allgather", "multiring", family="multiring", source="TASP (Wang et al. 2025)",
          options=(DECOMPOSITION,),
          cost=Cost("p - 1", "(p - 1) * n", "(p-1)(α + nβ/k), k cycles on a full mesh"))
def plan_multiring_allgather(call: Call) -> Program:
    """Multi-ring allgather (TASP): each block in k chunks, chunk c forwarded along
    Hamiltonian cycle c; every step sends k chunks to k successors at once.

    Rounds p-1, each of k concurrent messages (one per cycle) of n/k; bytes sent per rank
    (p-1)n (as the ring); time (p-1)(alpha + n beta / k) on a full mesh, where each directed
    link has its own bandwidth: k times the ring's per-step bandwidth (k = p-1 on one node).
    Chunks land straight in place in the receive buffer; any p, uneven blocks, IN_PLACE.
    """
    result, _ = allgather_blocks(call)
    cycles = multiring_cycles(call)
    return allgather_from_input(call, _multiring_allgather(call.p, call.rank, cycles, result))


@register("reduce_scatter", "multiring", family="multiring", source="TASP (Wang et al. 2025)",
          options=(DECOMPOSITION, *SEGMENTS),
          cost=Cost("p - 1", "(p - 1) * n", "(p-1)(α + nβ/k + nγ/k), k cycles on a full mesh"))
def plan_multiring_reduce_scatter(call: Call) -> Program:
    """Multi-ring reduce-scatter: the ring reduce-scatter on k Hamiltonian cycles at once,
    chunk c of every block reduced along cycle c.

    Rounds p-1, each of k concurrent messages of n/k; bytes sent per rank (p-1)n; time
    (p-1)(alpha + n beta / k + n gamma) on a full mesh.  Segmented like the ring
    (``segment_bytes``, default 1 MiB, applied to each chunk); partial sums land in two
    alternating scratch blocks as wide as the largest block (cycle c in its own part of
    each) and are reduced there in place; the last ones land in the result.
    """
    p, rank, counts = call.p, call.rank, call.counts
    source, result = reduce_scatter_blocks(call)
    if p == 1:
        return one_rank(source[0], result)
    cycles = multiring_cycles(call)
    k, width = len(cycles), max(counts)
    slots = blocks(SCRATCH, (width, width))

    def tables(c: int, cycle: Cycle, chunks: list[Region]):
        parts = [_landing(slot, k, c, chunks) for slot in slots]
        mine = cycle.index(rank)
        parts[0][mine] = parts[1][mine] = _chunk(result, k, c)

        def partial(step: int, j: int) -> Region:
            return parts[step % 2][j]
        return partial, partial

    program = _multiring_reduce_scatter(p, rank, cycles, segment_count(call), source, width,
                                        tables)
    return replace(program, scratch=2 * width)


@register("allreduce", "multiring", family="multiring", source="TASP (Wang et al. 2025)",
          options=(DECOMPOSITION, *SEGMENTS),
          cost=Cost("2 * (p - 1)", "2 * (p - 1) * n / p",
                    "2(p-1)α + 2(p-1)/p·nβ/k + (p-1)/p·nγ/k"))
def plan_multiring_allreduce(call: Call) -> Program:
    """Multi-ring allreduce: multi-ring reduce-scatter of p blocks into the result, then
    multi-ring allgather, both over the same k Hamiltonian cycles.

    Rounds 2(p-1), each of k concurrent messages; bytes sent per rank 2(p-1)n/p; time
    2(p-1)alpha + 2(p-1)/p n beta / k + (p-1)/p n gamma on a full mesh.  Segmented like the
    ring allreduce; one scratch block (cycle c in its own part) receives the incoming
    partial sums, which are reduced into the result.  IN_PLACE works.
    """
    p, rank = call.p, call.rank
    counts, source, result = vector_blocks(call)
    if p == 1:
        return one_rank(source[0], result[0])
    cycles = multiring_cycles(call)
    k, width = len(cycles), counts[0]
    landing = Region(SCRATCH, 0, width)

    def tables(c: int, cycle: Cycle, chunks: list[Region]):
        into = _landing(landing, k, c, chunks)
        sums = [_chunk(result[v], k, c) for v in cycle]
        return (lambda step, j: into[j]), (lambda step, j: sums[j])

    reduce = _multiring_reduce_scatter(p, rank, cycles, segment_count(call), source, width,
                                       tables)
    gather = _multiring_allgather(p, rank, cycles, result)
    return replace(sequence(reduce, gather), scratch=width)
