"""Direct algorithms: every transfer of the collective posted at once, peer to peer.

Rank r talks to r+i and r-i in order i = 1..p-1 so that not every rank sends to the same peer
first.  One round; the network (or MPI's progress engine) sees p-1 concurrent messages per rank.
Cost notation as in :mod:`hpccoll.algorithms.ring`.
"""

from __future__ import annotations

from ..registry import Cost, register
from ..schedule import (
    RECV,
    SCRATCH,
    SEND,
    Call,
    Copy,
    Program,
    Recv,
    Reduce,
    Region,
    Send,
    Step,
    offsets,
    one_rank,
    vector_blocks,
)


def _peers(p: int, rank: int) -> list[tuple[int, int]]:
    """(send-to, receive-from) pairs in the order they are posted."""
    return [((rank + i) % p, (rank - i) % p) for i in range(1, p)]


def _copy(src: Region, dst: Region) -> tuple[Copy, ...]:
    return (Copy(src, dst),) if dst.count else ()


def _allgather_step(p: int, rank: int, own: Region, blocks: list[Region]) -> Step:
    """Send ``own`` to every peer, receive every peer's block in place."""
    pairs = _peers(p, rank)
    return Step(sends=tuple(Send(to, (own,)) for to, _ in pairs if own.count),
                recvs=tuple(Recv(src, (blocks[src],)) for _, src in pairs if blocks[src].count))


def _reduce_scatter_step(p: int, rank: int, source: list[Region], result: Region,
                         staging: int) -> Step:
    """Send block j to rank j; every peer's block r lands in its own scratch slot at
    ``staging + i * |result|`` and is reduced into ``result`` on arrival (any order)."""
    pairs = _peers(p, rank)
    n = result.count
    recvs = []
    for i, (_, src) in enumerate(pairs):
        slot = Region(SCRATCH, staging + i * n, n)
        recvs.append(Recv(src, (slot,), (Reduce(result, (result, slot)),)))
    return Step(sends=tuple(Send(to, (source[to],)) for to, _ in pairs if source[to].count),
                recvs=tuple(recvs) if n else (),
                local=_copy(source[rank], result) if source[rank] != result else ())


@register("allgather", "direct", family="direct",
          cost=Cost("min(1, p - 1)", "(p - 1) * n", "α + (p-1)nβ (one port)"))
def plan_direct_allgather(call: Call) -> Program:
    """Direct allgather: send the own block to all p-1 peers at once.

    Rounds 1 (p-1 concurrent messages); bytes sent per rank (p-1)n; time about
    alpha + (p-1) n beta on one port, (p-1)alpha overhead in the endpoint.
    """
    p, rank = call.p, call.rank
    blocks = [Region(RECV, o, c) for o, c in zip(offsets(call.counts), call.counts)]
    own = blocks[rank] if call.in_place else Region(SEND, 0, call.counts[rank])
    step = _allgather_step(p, rank, own, blocks)
    local = () if call.in_place else _copy(own, blocks[rank])
    return Program((Step(step.sends, step.recvs, local),))


@register(("alltoall", "alltoallv"), "direct", family="direct",
          cost=Cost("min(1, p - 1)", "(p - 1) * n", "α + (p-1)nβ (one port)"))
def plan_direct_alltoall(call: Call) -> Program:
    """Direct all-to-all(v): send every block straight to its destination, all at once.

    Rounds 1 (p-1 concurrent messages); bytes sent per rank (p-1)n; time about
    alpha + (p-1) n beta on one port.  Any counts (alltoallv).
    """
    p, rank = call.p, call.rank
    out = [Region(SEND, d, c) for d, c in zip(call.sdispls, call.counts)]
    into = [Region(RECV, d, c) for d, c in zip(call.rdispls, call.recvcounts)]
    pairs = _peers(p, rank)
    return Program((Step(sends=tuple(Send(to, (out[to],)) for to, _ in pairs if out[to].count),
                         recvs=tuple(Recv(src, (into[src],)) for _, src in pairs
                                     if into[src].count),
                         local=_copy(out[rank], into[rank])),))


@register("reduce_scatter", "direct", family="direct",
          cost=Cost("min(1, p - 1)", "(p - 1) * n", "α + (p-1)n(β + γ)"))
def plan_direct_reduce_scatter(call: Call) -> Program:
    """Direct reduce-scatter: send block j to rank j, reduce the p-1 incoming blocks as they land.

    Rounds 1 (p-1 concurrent messages); bytes sent per rank (p-1)n; time about
    alpha + (p-1) n (beta + gamma).  Scratch (p-1)n.
    """
    p, rank, counts = call.p, call.rank, call.counts
    source = [Region(SEND, o, c) for o, c in zip(offsets(counts), counts)]
    result = Region(RECV, 0, counts[rank])
    return Program((_reduce_scatter_step(p, rank, source, result, 0),),
                   scratch=(p - 1) * counts[rank])


@register("allreduce", "direct", family="direct",
          cost=Cost("2 * min(1, p - 1)", "2 * (p - 1) * n / p", "2α + 2(p-1)/p·nβ + (p-1)/p·nγ"))
def plan_direct_allreduce(call: Call) -> Program:
    """Direct allreduce: direct reduce-scatter of p blocks, then direct allgather of the results.

    Rounds 2; bytes sent per rank 2(p-1)n/p; time about 2 alpha + 2(p-1)/p n beta
    + (p-1)/p n gamma on a full mesh.  Scratch (p-1)n/p.
    """
    p, rank = call.p, call.rank
    counts, source, result = vector_blocks(call)
    if p == 1:
        return one_rank(source[0], result[0])
    return Program((_reduce_scatter_step(p, rank, source, result[rank], 0),
                    _allgather_step(p, rank, result[rank], result)),
                   scratch=(p - 1) * counts[rank])
