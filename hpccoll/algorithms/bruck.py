"""Bruck's all-to-all (Bruck, Ho, Kipnis, Upfal, Weathersby 1997): ceil(log_r p) rounds, any p.

Rank j's block for rank (j + i) mod p travels under index i: it must cover i hops, and in
round k it hops r^k * (digit k of i in base r) ranks forward.  In round k a rank sends, for
each digit value v = 1..r-1, the blocks whose index has digit k equal to v to rank j + v r^k
and receives the same indices from rank j - v r^k; after the last round index i holds the
block from rank j - i.  The textbook version rotates the send buffer first (index i at
position i) and rotates back at the end; here both rotations are folded into the transfers
(a block is sent straight from the send buffer on its first hop and received into its place
in the receive buffer on its last), see :func:`hpccoll.algorithms.hypercube.relay_program`.
Cost notation as in :mod:`hpccoll.algorithms.ring` (n the bytes sent to one peer).
"""

from __future__ import annotations

import functools
import operator
from typing import Any

from ..registry import Constraint, Cost, register
from ..schedule import RECV, SEND, Call, Program, blocks
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


def _valid_radix(radix: Any) -> bool:
    try:
        return not isinstance(radix, bool) and operator.index(radix) >= 2
    except TypeError:
        return False


VALID_RADIX = Constraint("option radix is an integer >= 2",
                         lambda c: _valid_radix(c.option("radix", 2)))


@register("alltoall", "bruck", family="bruck", requires=(VALID_RADIX,),
          source="Bruck et al. 1997",
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
    radix = call.option("radix", 2)
    if not _valid_radix(radix):
        raise ValueError(f"bruck radix must be an integer >= 2, got {radix!r}")
    radix = operator.index(radix)
    mine, result = blocks(SEND, (n,) * p), blocks(RECV, (n,) * p)
    source = [mine[(rank + i) % p] for i in range(p)]
    final = [result[(rank - i) % p] for i in range(p)]
    rounds: list[list[Channel]] = [
        [((rank + hop) % p, (rank - hop) % p, indices) for hop, indices in messages]
        for messages in bruck_rounds(p, radix)]
    return relay_program(n, rounds, source, final)
