"""Shared-window algorithms (seed 004, "cross shared communication"): the ranks of a node
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
from ..registry import Constraint, Cost, register
from ..schedule import (RECV, SCRATCH, SEND, SYNC, WINDOW, Call, Copy, Program, Reduce, Recv,
                        Region, Send, Step, even_split, offsets)


def _nodes(call: Call) -> list[tuple[int, ...]]:
    """The nodes' ranks (one node when there is no topology)."""
    if call.topology is None:
        return [tuple(range(call.p))]
    return list(call.topology.nodes)


def _inter_is_valid(call: Call) -> bool:
    name = call.option("inter", "ring")
    return name != "csc" and (call.collective, name) in {
        (a.collective, a.name) for a in registry.algorithms(call.collective)}


NODES_IN_ORDER = Constraint("ranks numbered node by node",
                            lambda c: c.topology is None or c.topology.contiguous_nodes())
VALID_INTER = Constraint("option inter names another registered algorithm of the collective",
                         _inter_is_valid)
ONE_NODE = Constraint("one node", lambda c: len(_nodes(c)) == 1)


def _leaders_phase(call: Call, collective: str, counts: tuple[int, ...], *, in_place: bool,
                   send: int, recv: int) -> tuple[list[Step], int]:
    """The inter-node phase for this rank: the ``inter`` algorithm's program among the node
    leaders (node index as rank, ``counts`` per node), its send and receive buffers mapped to
    window offsets ``send``/``recv``; empty steps for the other ranks.  Returns the steps and
    the scratch they need."""
    nodes = _nodes(call)
    leaders = [members[0] for members in nodes]
    node = next(k for k, members in enumerate(nodes) if call.rank in members)
    planner = registry.get(collective, call.option("inter", "ring")).planner
    sub = planner(Call(collective, len(nodes), node, counts, in_place=in_place,
                       itemsize=call.itemsize, options=call.options))
    if call.rank != leaders[node]:
        return [Step() for _ in sub.steps], 0
    base = {SEND: (WINDOW, send), RECV: (WINDOW, recv), SCRATCH: (SCRATCH, 0)}

    def move(region: Region) -> Region:
        buffer, at = base[region.buffer]
        return Region(buffer, at + region.offset, region.count)

    def move_op(op):
        if isinstance(op, Copy):
            return Copy(move(op.src), move(op.dst))
        return Reduce(move(op.dst), tuple(move(r) for r in op.srcs))
    steps = [Step(tuple(Send(leaders[s.peer], tuple(map(move, s.regions))) for s in step.sends),
                  tuple(Recv(leaders[r.peer], tuple(map(move, r.regions)),
                             tuple(map(move_op, r.on_arrival))) for r in step.recvs),
                  tuple(map(move_op, step.local)))
             for step in sub.steps]
    return steps, sub.scratch


def _copy(src: Region, dst: Region) -> Step:
    return Step(local=(Copy(src, dst),) if dst.count else ())


@register("allgather", "csc", family="csc", requires=(NODES_IN_ORDER, VALID_INTER),
          source="seed 004 (CSC-AG)", cost=Cost("0", "0", "s + (p+1)n·μ (one node)"))
def plan_csc_allgather(call: Call) -> Program:
    """Shared-window allgather (CSC-AG): write the own block into the node's window at its
    place in the result, synchronise, copy the whole result out; on several nodes the leaders
    allgather the nodes' parts in place in the window in between.

    One node: 1 sync, no messages; each rank copies n in and pn out: time s + (p+1) n mu.
    u nodes: plus the ``inter`` allgather of u blocks of (p/u) n among the leaders and a sync.
    """
    counts = call.counts
    displs = offsets(counts)
    total = sum(counts)
    if not total:
        return Program(())
    own = Region(call.input, displs[call.rank] if call.in_place else 0, counts[call.rank])
    steps = [_copy(own, Region(WINDOW, displs[call.rank], own.count)), SYNC]
    scratch = 0
    nodes = _nodes(call)
    if len(nodes) > 1:
        node_counts = tuple(sum(counts[r] for r in members) for members in nodes)
        inter, scratch = _leaders_phase(call, "allgather", node_counts, in_place=True,
                                        send=0, recv=0)
        steps += inter + [SYNC]
    steps.append(_copy(Region(WINDOW, 0, total), Region(RECV, 0, total)))
    return Program(tuple(steps), scratch=scratch, window=total)


def _node_reduce(call: Call, members: tuple[int, ...], total: int, source: Region
                 ) -> tuple[list[Step], Region]:
    """Node-local reduction of every member's ``total``-element input: each writes it into its
    slot, sync, each reduces a disjoint chunk over all slots into the node's partial area.
    Returns the steps and the partial area."""
    m, i = len(members), members.index(call.rank)
    slots = [Region(WINDOW, j * total, total) for j in range(m)]
    partial = Region(WINDOW, m * total, total)
    chunks = even_split(total, m)
    at = offsets(chunks)[i]
    mine = partial.sub(at, chunks[i])
    reduce = Step(local=(Reduce(mine, tuple(s.sub(at, chunks[i]) for s in slots)),)
                  if mine.count else ())
    return [_copy(source, slots[i]), SYNC, reduce, SYNC], partial


@register("reduce_scatter", "csc", family="csc", requires=(NODES_IN_ORDER, VALID_INTER),
          source="seed 004 (CSC-RS)", cost=Cost("0", "0", "s + pn·μ + pn·γ (one node)"))
def plan_csc_reduce_scatter(call: Call) -> Program:
    """Shared-window reduce-scatter (CSC-RS): write the whole input into the own slot of the
    node's window, synchronise, reduce the own block over all p slots in one pass.

    One node: 1 sync, no messages; time s + N mu + N gamma with N = pn the input (each rank
    reads its block from p slots).  u nodes: the node reduces the vector into a partial
    (each rank a disjoint chunk), the leaders reduce-scatter the partials with ``inter``
    (node blocks), and each rank copies its block out: 3 syncs.
    """
    counts = call.counts
    displs = offsets(counts)
    total = sum(counts)
    if not total:
        return Program(())
    nodes = _nodes(call)
    source = Region(SEND, 0, total)
    result = Region(RECV, 0, counts[call.rank])
    if len(nodes) == 1:
        slots = [Region(WINDOW, j * total, total) for j in range(call.p)]
        reduce = Reduce(result, tuple(s.sub(displs[call.rank], result.count) for s in slots))
        steps = [_copy(source, slots[call.rank]), SYNC,
                 Step(local=(reduce,) if result.count else ())]
        return Program(tuple(steps), window=call.p * total)
    members = next(m for m in nodes if call.rank in m)
    steps, partial = _node_reduce(call, members, total, source)
    node_counts = tuple(sum(counts[r] for r in m) for m in nodes)
    node_result = partial.stop
    inter, scratch = _leaders_phase(call, "reduce_scatter", node_counts, in_place=False,
                                    send=partial.offset, recv=node_result)
    node_start = displs[members[0]]
    mine = Region(WINDOW, node_result + displs[call.rank] - node_start, result.count)
    steps += inter + [SYNC, _copy(mine, result)]
    node_total = sum(counts[r] for r in members)
    return Program(tuple(steps), scratch=scratch, window=node_result + node_total)


@register("allreduce", "csc", family="csc", requires=(NODES_IN_ORDER, VALID_INTER),
          source="seed 004", cost=Cost("0", "0", "2s + 2n·μ + n·γ (one node)"))
def plan_csc_allreduce(call: Call) -> Program:
    """Shared-window allreduce: reduce-scatter then allgather through the node's window: each
    rank writes its vector into its slot, sync, reduces a disjoint chunk over all slots into
    the result area, sync, copies the result out; on several nodes the leaders allreduce the
    nodes' results in place (``inter``) before a third sync.

    One node: 2 syncs, no messages; time 2s + 2n mu + n gamma (each rank reduces n/p over p
    slots).  u nodes: plus the ``inter`` allreduce of n among the leaders and a sync.
    """
    n = call.counts[0]
    if not n:
        return Program(())
    nodes = _nodes(call)
    members = next(m for m in nodes if call.rank in m)
    steps, partial = _node_reduce(call, members, n, Region(call.input, 0, n))
    scratch = 0
    if len(nodes) > 1:
        inter, scratch = _leaders_phase(call, "allreduce", (n,), in_place=True,
                                        send=partial.offset, recv=partial.offset)
        steps += inter + [SYNC]
    steps.append(_copy(partial, Region(RECV, 0, n)))
    return Program(tuple(steps), scratch=scratch, window=partial.stop)


@register("alltoall", "csc", family="csc", requires=(ONE_NODE,), source="seed 004",
          cost=Cost("0", "0", "s + 2pn·μ"))
def plan_csc_alltoall(call: Call) -> Program:
    """Shared-window all-to-all: write the whole send buffer into the own slot of the node's
    window, synchronise, read block r of every slot.

    One node only: 1 sync, no messages; time s + 2 pn mu.
    """
    p, rank, n = call.p, call.rank, call.counts[0]
    if not n:
        return Program(())
    slots = [Region(WINDOW, j * p * n, p * n) for j in range(p)]
    gather = tuple(Copy(slots[j].sub(rank * n, n), Region(RECV, j * n, n)) for j in range(p))
    steps = [_copy(Region(SEND, 0, p * n), slots[rank]), SYNC, Step(local=gather)]
    return Program(tuple(steps), window=p * p * n)
