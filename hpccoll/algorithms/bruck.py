"""Bruck's algorithms (Bruck, Ho, Kipnis, Upfal, Weathersby 1997, "Efficient Algorithms for
All-to-All Communications in Multiport Message-Passing Systems"): all-to-all and allgather in
ceil(log_r p) rounds for any p.

All-to-all.

Rank j's block for rank (j + i) mod p travels under index i: it must cover i hops, and in
round k it hops r^k * (digit k of i in base r) ranks forward.  In round k a rank sends, for
each digit value v = 1..r-1, the blocks whose index has digit k equal to v to rank j + v r^k
and receives the same indices from rank j - v r^k; after the last round index i holds the
block from rank j - i.  The textbook version rotates the send buffer first (index i at
position i) and rotates back at the end; here both rotations are folded into the transfers
(a block is sent straight from the send buffer on its first hop and received into its place
in the receive buffer on its last), see :func:`hpccoll.algorithms.hypercube.relay_program`.
Cost notation as in :mod:`hpccoll.algorithms.ring` (n the bytes sent to one peer).

Allgather.  Every block travels under its *offset*, the distance from the rank holding it to
the rank it came from: rank r holds block r + s at offset s.  A round is a distance d and the
offsets it delivers: rank r receives blocks r + s from rank r + d, which holds them at offsets
s - d, and sends rank r - d its own blocks at those offsets (:func:`offset_allgather`).
Bruck's allgather delivers offsets 2^k .. 2^(k+1)-1 at distance 2^k in round k, so what a
rank holds doubles every round; the textbook version gathers in rotated order and rotates at
the end, here every block lands in its place in the receive buffer.  The same rounds,
reversed and with partial sums instead of blocks, are a reduce-scatter
(:func:`offset_reduce_scatter`), which :mod:`hpccoll.algorithms.pat` uses.
"""

from __future__ import annotations

import functools
import operator
from typing import Any, Sequence

from ..registry import Cost, Option, register
from ..schedule import (RECV, SCRATCH, SEND, Call, Program, ProgramBuilder, Reduce, Region,
                        allgather_from_input, blocks, edges, merge_adjacent, one_rank,
                        reduce_scatter_blocks)
from .hypercube import Channel, relay_program


@functools.lru_cache(maxsize=64)
def bruck_rounds(p: int, radix: int = 2) -> tuple[tuple[tuple[int, tuple[int, ...]], ...], ...]:
    """Per round, the (hop distance, indices carried) of each of its up to r-1 messages
    (the same on every rank, so computed once per (p, radix))."""
    rounds = []
    weight = 1
    while weight < p:
        by_digit: dict[int, list[int]] = {}
        for i in range(weight, p):
            digit = (i // weight) % radix
            if digit:
                by_digit.setdefault(digit, []).append(i)
        rounds.append(tuple((v * weight, tuple(indices))
                            for v, indices in sorted(by_digit.items())))
        weight *= radix
    return tuple(rounds)


def integer_at_least(value: Any, least: int) -> bool:
    """Whether ``value`` is an integer (not a bool) of at least ``least``."""
    try:
        return not isinstance(value, bool) and operator.index(value) >= least
    except TypeError:
        return False


def _valid_radix(radix: Any) -> bool:
    return integer_at_least(radix, 2)


RADIX = Option("radix", "an integer >= 2", "2",
               "the base of the hop counts' digits: r - 1 messages a round, ceil(log_r p) rounds",
               _valid_radix)


def _radix(call: Call) -> int:
    radix = call.option("radix", 2)
    if not _valid_radix(radix):
        raise ValueError(f"bruck radix must be an integer >= 2, got {radix!r}")
    return operator.index(radix)


def bruck_alltoall_sizes(call: Call) -> Program:
    """:func:`plan_bruck_alltoall`'s steps by size alone (registry ``sizes``): each round's
    messages to and from the same peers with as many elements, and the own block's copy,
    without naming the about p/2 blocks of each message (p^2 log p regions in all: what
    the simulator cannot hold at 16,384 ranks)."""
    p, rank, n = call.p, call.rank, call.counts[0]
    radix = _radix(call)
    if n == 0:
        return Program(())
    steps = ProgramBuilder()
    for messages in bruck_rounds(p, radix):
        step = steps.step()
        for hop, indices in messages:
            step.send((rank + hop) % p, Region(SEND, 0, n * len(indices)))
            step.recv((rank - hop) % p, Region(RECV, 0, n * len(indices)))
    steps.first().copy(Region(SEND, 0, n), Region(RECV, 0, n))     # (index 0 never moves)
    return steps.program()


@register("alltoall", "bruck", family="bruck", options=(RADIX,),
          source="Bruck et al. 1997", sizes=bruck_alltoall_sizes,
          cost=Cost("ceil(log2(p))", "n * popsum(p)", "⌈log2 p⌉α + n·Σpopcount(i<p)·β, radix 2"))
def plan_bruck_alltoall(call: Call) -> Program:
    """Bruck all-to-all: ceil(log_r p) rounds for any p; round k forwards every block whose
    hop count has digit k set, r^k ranks on, combined into one message per digit value.

    Radix r = option ``radix`` (default 2).  Radix 2: rounds ceil(log2 p), one message each
    way per round carrying the about p/2 blocks whose index has bit k set; bytes sent per
    rank n * (sum of popcount(i), i < p), about n p/2 ceil(log2 p); time
    ceil(log2 p) alpha + about n p/2 ceil(log2 p) beta, plus packing.  Radix r: r-1 messages
    per round (concurrent), about n p (r-1)/r bytes per round.  r >= p is the direct
    algorithm.  Scratch at most (p-1) n (blocks that hop twice or more).
    """
    p, rank, n = call.p, call.rank, call.counts[0]
    radix = _radix(call)
    mine, result = blocks(SEND, (n,) * p), blocks(RECV, (n,) * p)
    source = [mine[(rank + i) % p] for i in range(p)]
    final = [result[(rank - i) % p] for i in range(p)]
    rounds: list[list[Channel]] = [
        [((rank + hop) % p, (rank - hop) % p, indices) for hop, indices in messages]
        for messages in bruck_rounds(p, radix)]
    return relay_program(n, rounds, source, final)


# ------------------------------------------------------------------------------- allgather

OffsetRound = tuple[int, Sequence[int]]   # (distance, offsets delivered)


def offset_allgather(call: Call, rounds: list[OffsetRound]) -> Program:
    """An allgather in ``rounds``: in round (d, offsets) rank r receives blocks r + s
    (s in offsets) from rank r + d and sends rank r - d its blocks r + s - d, one message each
    way.  Every block lands in its place in the receive buffer; the own block is sent from
    the input.  The rounds must deliver every offset 1..p-1 once, each after offset s - d.
    Offsets given as a ``range`` of step 1 are found as one run (at most two regions, as it
    may wrap round), in time independent of its length."""
    p, rank = call.p, call.rank
    at = edges(call.counts)

    def held(first: int, delivered: Sequence[int]) -> tuple[Region, ...]:
        """Blocks first + s (mod p), s in ``delivered``, of the receive buffer, fused."""
        runs = [(delivered.start, delivered.stop)] if isinstance(delivered, range) and \
            delivered.step == 1 else [(s, s + 1) for s in delivered]
        regions = []
        for a, b in runs:
            start = (first + a) % p
            stop = start + b - a
            regions.append(Region(RECV, at[start], at[min(stop, p)] - at[start]))
            if stop > p:
                regions.append(Region(RECV, 0, at[stop - p]))
        return merge_adjacent(regions)
    steps = ProgramBuilder()
    for distance, delivered in rounds:
        step = steps.step()
        step.send((rank - distance) % p, *held(rank - distance, delivered))
        step.recv((rank + distance) % p, *held(rank, delivered))
    return allgather_from_input(call, steps.program())


def offset_reduce_scatter(call: Call, rounds: list[OffsetRound]) -> Program:
    """The reduce-scatter that mirrors :func:`offset_allgather`'s ``rounds``: they run in
    reverse order, and in round (d, offsets) rank x sends its partial sums for ranks x + s
    (s in offsets) to rank x + d and folds the ones rank x - d sends into its partial sums for
    ranks x + s - d.

    A partial sum is the input block until its first arrival, then a scratch slot of its
    own (the result for the own block); a slot is reused once its sum has been sent, so the
    scratch is the landing area of one message plus the sums in progress at once."""
    p, rank, counts = call.p, call.rank, call.counts
    source, result = reduce_scatter_blocks(call)
    if p == 1:
        return one_rank(source[0], result)
    width = max(counts)
    landing = max((sum(counts[(rank + s - d) % p] for s in delivered) for d, delivered in rounds),
                  default=0)
    partial: dict[int, Region] = {0: result}        # offset -> where its sum accumulates
    started: set[int] = set()                       # offsets whose sum has left the input
    free: list[int] = []
    slots = 0
    steps = ProgramBuilder()
    for distance, delivered in reversed(rounds):
        step = steps.step()
        step.send((rank + distance) % p, *merge_adjacent(
            partial[s] if s in started else source[(rank + s) % p] for s in delivered))
        at, arriving, ops = 0, [], []
        for s in delivered:
            target = s - distance
            block = source[(rank + target) % p]
            piece = Region(SCRATCH, at, block.count)
            at += block.count
            arriving.append(piece)
            if target not in partial:
                if not free:
                    free.append(landing + slots * width)
                    slots += 1
                partial[target] = Region(SCRATCH, free.pop(), block.count)
            acc = partial[target]
            ops.append(Reduce(acc, (acc if target in started else block, piece)))
            started.add(target)
        step.recv((rank - distance) % p, *merge_adjacent(arriving), on_arrival=ops)
        for s in delivered:
            if s in partial and s != 0:
                free.append(partial.pop(s).offset)
    return steps.program(landing + slots * width)


def bruck_allgather_rounds(p: int) -> list[OffsetRound]:
    """Bruck's allgather rounds: offsets 2^k .. 2^(k+1)-1 (below p) at distance 2^k."""
    return [(1 << k, range(1 << k, min(2 << k, p))) for k in range((p - 1).bit_length())]


@register("allgather", "bruck", family="bruck", source="Bruck et al. 1997",
          options=(),
          cost=Cost("ceil(log2(p))", "(p - 1) * n", "⌈log2 p⌉α + (p-1)nβ"))
def plan_bruck_allgather(call: Call) -> Program:
    """Bruck allgather: ceil(log2 p) rounds for any p; in round k each rank sends everything
    it holds (up to 2^k blocks) to rank - 2^k and receives as much from rank + 2^k.

    Rounds ceil(log2 p); bytes sent per rank (p-1)n, in messages doubling in size (the last
    one p - 2^(ceil(log2 p)-1) blocks); time ceil(log2 p) alpha + (p-1) n beta.  Uneven
    blocks, IN_PLACE; no scratch; a message is at most two regions (the blocks of ranks
    r .. r + 2^k - 1 wrap round at most once), which the executor packs.
    """
    return offset_allgather(call, bruck_allgather_rounds(call.p))
