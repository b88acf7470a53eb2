"""Direct algorithms: every transfer of the collective posted at once, peer to peer.

Rank r talks to r+i and r-i in order i = 1..p-1 so that not every rank sends to the same peer
first.  One round; the network (or MPI's progress engine) sees p-1 concurrent messages per rank.
Cost notation as in :mod:`hpccoll.algorithms.ring`.
"""

from __future__ import annotations

from ..registry import Cost, register
from ..schedule import (SCRATCH, Call, Program, Reduce, Region, StepBuilder, allgather_blocks,
                        allgather_from_input, alltoall_blocks, one_rank, pairs_by_distance,
                        reduce_scatter_blocks, sequence, vector_blocks)


def _allgather(p: int, rank: int, result: list[Region]) -> Program:
    """One step: send the own result block to every peer, receive every peer's in place."""
    step = StepBuilder()
    for to, frm in pairs_by_distance(p, rank):
        step.send(to, result[rank])
        step.recv(frm, result[frm])
    return Program((step.build(),))


def _reduce_scatter(p: int, rank: int, source: list[Region], result: Region) -> Program:
    """One step: send block j to rank j; every peer's block ``rank`` lands in a scratch slot
    of its own and is reduced into ``result`` on arrival (any order)."""
    step = StepBuilder()
    step.copy(source[rank], result)
    for i, (to, frm) in enumerate(pairs_by_distance(p, rank)):
        slot = Region(SCRATCH, i * result.count, result.count)
        step.send(to, source[to])
        step.recv(frm, slot, on_arrival=(Reduce(result, (result, slot)),))
    return Program((step.build(),), scratch=(p - 1) * result.count)


@register("allgather", "direct", family="direct", options=(),
          cost=Cost("min(1, p - 1)", "(p - 1) * n", "α + (p-1)nβ (one port)"))
def plan_direct_allgather(call: Call) -> Program:
    """Direct allgather: send the own block to all p-1 peers at once.

    Rounds 1 (p-1 concurrent messages); bytes sent per rank (p-1)n; time about
    alpha + (p-1) n beta on one port, (p-1)alpha overhead in the endpoint.
    """
    result, _ = allgather_blocks(call)
    return allgather_from_input(call, _allgather(call.p, call.rank, result))


@register(("alltoall", "alltoallv"), "direct", family="direct", options=(),
          cost=Cost("min(1, p - 1)", "(p - 1) * n", "α + (p-1)nβ (one port)"))
def plan_direct_alltoall(call: Call) -> Program:
    """Direct all-to-all(v): send every block straight to its destination, all at once.

    Rounds 1 (p-1 concurrent messages); bytes sent per rank (p-1)n; time about
    alpha + (p-1) n beta on one port.  Any counts (alltoallv).
    """
    out, into = alltoall_blocks(call)
    step = StepBuilder()
    step.copy(out[call.rank], into[call.rank])
    for to, frm in pairs_by_distance(call.p, call.rank):
        step.send(to, out[to])
        step.recv(frm, into[frm])
    return Program((step.build(),))


@register("reduce_scatter", "direct", family="direct", options=(),
          cost=Cost("min(1, p - 1)", "(p - 1) * n", "α + (p-1)n(β + γ)"))
def plan_direct_reduce_scatter(call: Call) -> Program:
    """Direct reduce-scatter: send block j to rank j, reduce the p-1 incoming blocks as they land.

    Rounds 1 (p-1 concurrent messages); bytes sent per rank (p-1)n; time about
    alpha + (p-1) n (beta + gamma).  Scratch (p-1)n.
    """
    source, result = reduce_scatter_blocks(call)
    return _reduce_scatter(call.p, call.rank, source, result)


@register("allreduce", "direct", family="direct", options=(),
          cost=Cost("2 * min(1, p - 1)", "2 * (p - 1) * n / p", "2α + 2(p-1)/p·nβ + (p-1)/p·nγ"))
def plan_direct_allreduce(call: Call) -> Program:
    """Direct allreduce: direct reduce-scatter of p blocks, then direct allgather of the results.

    Rounds 2; bytes sent per rank 2(p-1)n/p; time about 2 alpha + 2(p-1)/p n beta
    + (p-1)/p n gamma on a full mesh.  Scratch (p-1)n/p.
    """
    p, rank = call.p, call.rank
    _, source, result = vector_blocks(call)
    if p == 1:
        return one_rank(source[0], result[0])
    return sequence(_reduce_scatter(p, rank, source, result[rank]),
                    _allgather(p, rank, result))
