"""Ring algorithms: every rank talks only to its two ring neighbours.

Cost notation: p ranks, alpha the per-message start-up, beta the per-byte time, n the bytes a
rank contributes (allgather), receives (reduce-scatter), holds (allreduce) or sends to one
peer (alltoall), gamma the per-byte reduction time.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Callable

from ..registry import Cost, register, segment_option
from ..schedule import (RECV, SCRATCH, SEND, Call, Copy, Program, ProgramBuilder, Reduce, Region,
                        allgather_blocks, allgather_from_input, blocks, merge_adjacent, one_rank,
                        reduce_scatter_blocks, segment_count, segments, sequence, vector_blocks)

SEGMENTS = (segment_option("1 MiB"),)


def ring_allgather(p: int, rank: int, result: list[Region]) -> Program:
    """The ring allgather of ``result`` (block r from rank r), in place: p-1 steps; in step k
    rank r forwards block r-k to r+1 and receives block r-k-1."""
    right, left = (rank + 1) % p, (rank - 1) % p
    steps = ProgramBuilder()
    for k in range(p - 1):
        step = steps.step()
        step.send(right, result[(rank - k) % p])
        step.recv(left, result[(rank - k - 1) % p])
    return steps.program()


def ring_reduce_scatter(p: int, rank: int, source: list[Region],
                        staging: Callable[[int, int], Region],
                        partial: Callable[[int, int], Region], segment: int) -> Program:
    """The ring reduce-scatter of blocks ``source[0..p-1]``: p-1 steps.

    In step k rank r sends the partial sum of block r-k-1 (for k = 0 its own ``source``
    block, later ``partial(k-1, r-k-1)``) to r+1, and receives the partial sum of block j = r-k-2
    into ``staging(k, j)``; on arrival ``partial(k, j) = source[j] op staging(k, j)``.  After
    the last step ``partial(p-2, r)`` holds the fully reduced block r.  Messages are cut into
    segments of ``segment`` elements, each reduced as soon as it lands, so reduction overlaps
    the transfer of the rest.  The caller sizes the scratch its regions need.
    """
    right, left = (rank + 1) % p, (rank - 1) % p
    steps = ProgramBuilder()
    for k in range(p - 1):
        step = steps.step()
        out_block, j = (rank - k - 1) % p, (rank - k - 2) % p
        out = source[out_block] if k == 0 else partial(k - 1, out_block)
        into, acc, own = staging(k, j), partial(k, j), source[j]
        for piece in segments(out, segment):
            step.send(right, piece)
        for piece in segments(into, segment):
            at = piece.offset - into.offset
            step.recv(left, piece, on_arrival=(
                Reduce(acc.sub(at, piece.count), (own.sub(at, piece.count), piece)),))
    return steps.program()


@register("allgather", "ring", family="ring", source="classic ring (TASP's baseline)", options=(),
          cost=Cost("p - 1", "(p - 1) * n", "(p-1)(α + nβ)"))
def plan_ring_allgather(call: Call) -> Program:
    """Ring allgather: p-1 steps, each forwarding the block received in the step before.

    Rounds p-1; bytes sent per rank (p-1)n; time (p-1)(alpha + n beta).  Any p, uneven blocks.
    """
    result, _ = allgather_blocks(call)
    return allgather_from_input(call, ring_allgather(call.p, call.rank, result))


@register("reduce_scatter", "ring", family="ring", source="classic ring", options=SEGMENTS,
          cost=Cost("p - 1", "(p - 1) * n", "(p-1)(α + nβ + nγ)"))
def plan_ring_reduce_scatter(call: Call) -> Program:
    """Ring reduce-scatter: p-1 steps, partial sums travel the ring and grow by one term a step.

    Rounds p-1; bytes sent per rank (p-1)n; time (p-1)(alpha + n beta + n gamma).  Messages are
    segmented (option ``segment_bytes``, default 1 MiB) so reduction overlaps the transfer.
    Partial sums land in two alternating scratch blocks (one is being sent while the other
    fills) and are reduced there in place; the last one lands in the result.
    """
    p, rank, counts = call.p, call.rank, call.counts
    source, result = reduce_scatter_blocks(call)
    if p == 1:
        return one_rank(source[0], result)
    width = max(counts)
    slots = blocks(SCRATCH, (width, width))

    def partial(k: int, j: int) -> Region:
        return result if j == rank else slots[k % 2].sub(0, counts[j])

    program = ring_reduce_scatter(p, rank, source, partial, partial, segment_count(call))
    return replace(program, scratch=2 * width)


@register("allreduce", "ring", family="ring", options=SEGMENTS,
          source="Patarasuk & Yuan 2009 (RAT's baseline)",
          cost=Cost("2 * (p - 1)", "2 * (p - 1) * n / p",
                    "2(p-1)α + 2(p-1)/p·nβ + (p-1)/p·nγ"))
def plan_ring_allreduce(call: Call) -> Program:
    """Ring allreduce: ring reduce-scatter of p blocks into the result, then ring allgather.

    Rounds 2(p-1); bytes sent per rank 2(p-1)n/p; time 2(p-1)alpha + 2(p-1)/p n beta
    + (p-1)/p n gamma (bandwidth-optimal).  Segmented like the ring reduce-scatter; one
    scratch block receives the incoming partial sums, which are reduced into the result.
    """
    p, rank = call.p, call.rank
    counts, source, result = vector_blocks(call)
    if p == 1:
        return one_rank(source[0], result[0])
    landing = Region(SCRATCH, 0, counts[0])
    reduce = ring_reduce_scatter(p, rank, source, lambda k, j: landing.sub(0, counts[j]),
                                 lambda k, j: result[j], segment_count(call))
    return replace(sequence(reduce, ring_allgather(p, rank, result)), scratch=counts[0])


Piece = tuple[int, int]  # (offset inside the destination block, count)


def _forwarding_alltoall(call: Call, directions: dict[int, list[Piece]]) -> Program:
    """All-to-all by store-and-forward along the ring, in one or both directions.

    ``directions[d][i]`` (d = +1 to the right, -1 to the left) is the piece of the block for
    the rank i+1 hops away that travels in direction d.  In step k a rank sends, each way, the
    pieces of origin r - d(k-1) that still have to go k or more hops; the receiver keeps the
    piece for itself (at the front of the message) and forwards the rest in step k+1.
    Incoming messages alternate between two scratch slots per direction.
    """
    p, rank, n = call.p, call.rank, call.counts[0]
    mine, result = blocks(SEND, (n,) * p), blocks(RECV, (n,) * p)
    rounds = max((len(pieces) for pieces in directions.values()), default=0)
    layout, scratch = {}, 0
    for d, pieces in directions.items():
        remaining = [0] * (len(pieces) + 1)       # remaining[i]: count of pieces i.. onwards
        for i in range(len(pieces) - 1, -1, -1):
            remaining[i] = remaining[i + 1] + pieces[i][1]
        layout[d] = (scratch, remaining)
        scratch += 2 * remaining[0]
    steps = ProgramBuilder(rounds)
    for k in range(1, rounds + 1):
        step = steps[k - 1]
        for d, pieces in directions.items():
            base, remaining = layout[d]
            slot = [base, base + remaining[0]]
            total = remaining[k - 1] if k <= len(pieces) else 0
            if not total:
                continue
            if k == 1:
                out = merge_adjacent(mine[(rank + d * dist) % p].sub(off, c)
                                     for dist, (off, c) in enumerate(pieces, 1))
            else:
                out = (Region(SCRATCH, slot[(k - 1) % 2] + pieces[k - 2][1], total),)
            step.send((rank + d) % p, *out)
            off, kept = pieces[k - 1]
            keep = result[(rank - d * k) % p].sub(off, kept)
            if kept == total:
                step.recv((rank - d) % p, keep)
            else:
                landing = Region(SCRATCH, slot[k % 2], total)
                step.recv((rank - d) % p, landing, on_arrival=(Copy(landing.sub(0, kept), keep),))
    if n:
        steps.first().copy(mine[rank], result[rank])
    return steps.program(scratch)


@register("alltoall", "ring", family="ring", source="All-to-all (parallel pattern)", options=(),
          cost=Cost("p - 1", "n * p * (p - 1) / 2", "(p-1)α + n·p(p-1)/2·β"))
def plan_ring_alltoall(call: Call) -> Program:
    """Ring all-to-all, one direction: each rank sends all p-1 blocks to its right neighbour,
    which keeps its own and forwards the rest (the article "All-to-all (parallel pattern)").

    Rounds p-1; bytes sent per rank n p(p-1)/2; time (p-1)alpha + n p(p-1)/2 beta.
    """
    return _forwarding_alltoall(call, {1: [(0, call.counts[0])] * (call.p - 1)})


@register("alltoall", "ring_bidirectional", family="ring", options=(),
          source="All-to-all (parallel pattern)",
          cost=Cost("p // 2", "n * (p * p // 4)", "⌊p/2⌋α + n·⌊p²/4⌋/2·β (both ways at once)"))
def plan_ring_bidirectional_alltoall(call: Call) -> Program:
    """Ring all-to-all, half each way: blocks go the shorter way round; for even p the block
    opposite is split in two halves, one each way (the all-to-all article's improvement).

    Rounds floor(p/2); bytes sent per rank about n p^2/4 (n p^2/8 each way, concurrently);
    time floor(p/2) alpha + about n p^2/8 beta on full-duplex links.
    """
    p, n = call.p, call.counts[0]
    right = [(0, n)] * ((p - 1) // 2)
    left = list(right)
    if p % 2 == 0 and p > 1:
        right.append((0, n // 2))
        left.append((n // 2, n - n // 2))
    return _forwarding_alltoall(call, {1: right, -1: left})
