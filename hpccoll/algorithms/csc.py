"""Shared-window algorithms (the SW-IntraCC paper, "cross shared communication"): the ranks of a node
exchange data through the node's shared segment instead of sending it.

Every rank writes its contribution into the window, the node synchronises once, and every
rank reads (allgather, alltoall) or reads and reduces (reduce-scatter, allreduce) what it
needs, all ranks in parallel.  On several nodes the composition is hierarchical: a node-local
phase through the window, an inter-node phase among the node leaders (the lowest rank of each
node) run by another registered algorithm (option ``inter``, default ``ring``) on the window,
and a node-local distribution.  The executor backs ``window`` with ``MPI.Win.Allocate_shared``
on each node and alternates between two halves of it on successive calls, so one call's reads
never race the next call's writes.  Cost notation as in :mod:`hpccoll.algorithms.ring`;
``mu`` is the per-byte time of a memory copy, ``s`` the cost of a node synchronisation.
"""

from __future__ import annotations

from .. import registry
from ..registry import Constraint, Cost, Option, register
from ..schedule import (RECV, SEND, SYNC, WINDOW, Call, Copy, Program, Reduce, Region, Step,
                        allgather_blocks, allreduce_vectors, blocks, even_split, local_step, offsets,
                        reduce_scatter_blocks, relabel, relocate)


def _nodes(call: Call) -> list[tuple[int, ...]]:
    """The nodes' ranks (one node when there is no topology)."""
    if call.topology is None:
        return [tuple(range(call.p))]
    return list(call.topology.nodes)


def _own_node(call: Call) -> tuple[int, tuple[int, ...]]:
    """This rank's node: its index and its ranks."""
    return next((k, members) for k, members in enumerate(_nodes(call)) if call.rank in members)


def _node_counts(call: Call) -> tuple[int, ...]:
    """The elements of every node's blocks together."""
    return tuple(sum(call.counts[r] for r in members) for members in _nodes(call))


def _inter_is_valid(call: Call) -> bool:
    name = call.option("inter", "ring")
    return name != "csc" and (call.collective, name) in {
        (a.collective, a.name) for a in registry.algorithms(call.collective)}


NODES_IN_ORDER = Constraint("ranks numbered node by node",
                            lambda c: c.topology is None or c.topology.contiguous_nodes())
VALID_INTER = Constraint("option inter names another registered algorithm of the collective",
                         _inter_is_valid)
ONE_NODE = Constraint("one node", lambda c: len(_nodes(c)) == 1)
INTER = Option("inter", "the name of another registered algorithm of the collective", "'ring'",
               "the algorithm the node leaders run between nodes, on the window (it gets "
               "no options of its own)", lambda value: isinstance(value, str))


def _leaders_phase(call: Call, collective: str, counts: tuple[int, ...], *, in_place: bool,
                   send: int, recv: int) -> Program:
    """The inter-node phase for this rank: the ``inter`` algorithm's program among the node
    leaders (node index as rank, ``counts`` per node), its send and receive buffers moved to
    window offsets ``send``/``recv``; as many empty steps for the other ranks."""
    leaders = [members[0] for members in _nodes(call)]
    node, _ = _own_node(call)
    planner = registry.get(collective, call.option("inter", "ring")).planner
    sub = planner(Call(collective, len(leaders), node, counts, in_place=in_place,
                       itemsize=call.itemsize))
    if call.rank != leaders[node]:
        return Program((Step(),) * len(sub.steps))
    return relabel(relocate(sub, {SEND: (WINDOW, send), RECV: (WINDOW, recv)}), leaders)


@register("allgather", "csc", family="csc", requires=(NODES_IN_ORDER, VALID_INTER),
          options=(INTER,),
          source="SW-IntraCC (CSC-AG)", cost=Cost("0", "0", "s + (p+1)n·μ (one node)"))
def plan_csc_allgather(call: Call) -> Program:
    """Shared-window allgather (CSC-AG): write the own block into the node's window at its
    place in the result, synchronise, copy the whole result out; on several nodes the leaders
    allgather the nodes' parts in place in the window in between.

    One node: 1 sync, no messages; each rank copies n in and pn out: time s + (p+1) n mu.
    u nodes: plus the ``inter`` allgather of u blocks of (p/u) n among the leaders and a sync.
    """
    total = sum(call.counts)
    if not total:
        return Program(())
    _, own = allgather_blocks(call)
    window = blocks(WINDOW, call.counts)
    steps = [local_step(Copy(own, window[call.rank])), SYNC]
    inter = Program(())
    if len(_nodes(call)) > 1:
        inter = _leaders_phase(call, "allgather", _node_counts(call), in_place=True,
                               send=0, recv=0)
        steps += [*inter.steps, SYNC]
    steps.append(local_step(Copy(Region(WINDOW, 0, total), Region(RECV, 0, total))))
    return Program(tuple(steps), scratch=inter.scratch, window=total)


def _node_reduce(call: Call, total: int, source: Region) -> tuple[list[Step], Region]:
    """Node-local reduction of every member's ``total``-element input: each writes it into its
    slot, sync, each reduces a disjoint chunk over all slots into the node's partial area.
    Returns the steps and the partial area."""
    _, members = _own_node(call)
    m, i = len(members), members.index(call.rank)
    slots = blocks(WINDOW, (total,) * m)
    partial = Region(WINDOW, m * total, total)
    chunks = even_split(total, m)
    at, count = offsets(chunks)[i], chunks[i]
    reduce = Reduce(partial.sub(at, count), tuple(s.sub(at, count) for s in slots))
    return [local_step(Copy(source, slots[i])), SYNC, local_step(reduce), SYNC], partial


@register("reduce_scatter", "csc", family="csc", requires=(NODES_IN_ORDER, VALID_INTER),
          options=(INTER,),
          source="SW-IntraCC (CSC-RS)", cost=Cost("0", "0", "s + pn·μ + pn·γ (one node)"))
def plan_csc_reduce_scatter(call: Call) -> Program:
    """Shared-window reduce-scatter (CSC-RS): write the whole input into the own slot of the
    node's window, synchronise, reduce the own block over all p slots in one pass.

    One node: 1 sync, no messages; time s + N mu + N gamma with N = pn the input (each rank
    reads its block from p slots).  u nodes: the node reduces the vector into a partial
    (each rank a disjoint chunk), the leaders reduce-scatter the partials with ``inter``
    (node blocks), and each rank copies its block out: 3 syncs.
    """
    counts, rank = call.counts, call.rank
    displs = offsets(counts)
    total = sum(counts)
    if not total:
        return Program(())
    source = Region(SEND, 0, total)
    _, result = reduce_scatter_blocks(call)
    if len(_nodes(call)) == 1:
        slots = blocks(WINDOW, (total,) * call.p)
        reduce = Reduce(result, tuple(s.sub(displs[rank], result.count) for s in slots))
        steps = [local_step(Copy(source, slots[rank])), SYNC, local_step(reduce)]
        return Program(tuple(steps), window=call.p * total)
    steps, partial = _node_reduce(call, total, source)
    node_result = partial.stop
    inter = _leaders_phase(call, "reduce_scatter", _node_counts(call), in_place=False,
                           send=partial.offset, recv=node_result)
    node, members = _own_node(call)
    mine = Region(WINDOW, node_result + displs[rank] - displs[members[0]], result.count)
    steps += [*inter.steps, SYNC, local_step(Copy(mine, result))]
    return Program(tuple(steps), scratch=inter.scratch,
                   window=node_result + _node_counts(call)[node])


@register("allreduce", "csc", family="csc", requires=(NODES_IN_ORDER, VALID_INTER),
          options=(INTER,),
          source="SW-IntraCC", cost=Cost("0", "0", "2s + 2n·μ + n·γ (one node)"))
def plan_csc_allreduce(call: Call) -> Program:
    """Shared-window allreduce: reduce-scatter then allgather through the node's window: each
    rank writes its vector into its slot, sync, reduces a disjoint chunk over all slots into
    the result area, sync, copies the result out; on several nodes the leaders allreduce the
    nodes' results in place (``inter``) before a third sync.

    One node: 2 syncs, no messages; time 2s + 2n mu + n gamma (each rank reduces n/p over p
    slots).  u nodes: plus the ``inter`` allreduce of n among the leaders and a sync.
    """
    source, result = allreduce_vectors(call)
    n = result.count
    if not n:
        return Program(())
    steps, partial = _node_reduce(call, n, source)
    inter = Program(())
    if len(_nodes(call)) > 1:
        inter = _leaders_phase(call, "allreduce", (n,), in_place=True,
                               send=partial.offset, recv=partial.offset)
        steps += [*inter.steps, SYNC]
    steps.append(local_step(Copy(partial, result)))
    return Program(tuple(steps), scratch=inter.scratch, window=partial.stop)


@register("alltoall", "csc", family="csc", requires=(ONE_NODE,), options=(),
          source="SW-IntraCC",
          cost=Cost("0", "0", "s + 2pn·μ"))
def plan_csc_alltoall(call: Call) -> Program:
    """Shared-window all-to-all: write the whole send buffer into the own slot of the node's
    window, synchronise, read block r of every slot.

    One node only: 1 sync, no messages; time s + 2 pn mu.
    """
    p, rank, n = call.p, call.rank, call.counts[0]
    if not n:
        return Program(())
    slots = blocks(WINDOW, (p * n,) * p)
    result = blocks(RECV, (n,) * p)
    gather = (Copy(slots[j].sub(rank * n, n), result[j]) for j in range(p))
    steps = [local_step(Copy(Region(SEND, 0, p * n), slots[rank])), SYNC, local_step(*gather)]
    return Program(tuple(steps), window=p * p * n)
