"""Pairwise exchange: in every round each rank swaps one block with exactly one partner.

The rounds form a 1-factorisation of the complete graph on the ranks (the article "All-to-all (parallel pattern)"): every pair of
ranks meets in exactly one round, and within a round "partner of" is an involution.  Two
pairings are provided:

* the **1-factor** algorithm, any p: for odd p, round i pairs rank j with (i - j) mod p
  (p rounds, the rank with 2j = i mod p idle); for even p, rank p-1 takes the place of the
  idle rank of the odd construction on p-1 ranks (p-1 rounds, nobody idle);
* **XOR** pairing, p a power of two: round i pairs rank j with j XOR i (p-1 rounds), the
  pairing that suits hypercubes and fat trees.

Every transfer goes straight from the send buffer to the receive buffer (no copies, no
scratch).  Cost notation as in :mod:`hpccoll.algorithms.ring` (n the bytes sent to one peer).
"""

from __future__ import annotations

from typing import Callable

from ..registry import POWER_OF_TWO, Cost, register
from ..schedule import Call, Program, ProgramBuilder, alltoall_blocks


def one_factor_rounds(p: int) -> int:
    """Rounds of the 1-factor algorithm: p for odd p, p-1 for even p (0 for p = 1)."""
    return 0 if p == 1 else p if p % 2 else p - 1


def one_factor_partner(p: int, rank: int, i: int) -> int:
    """The partner of ``rank`` in round ``i`` of the 1-factor algorithm (``rank`` itself when
    it is idle, which happens once for odd p and never for even p)."""
    if p % 2:
        return (i - rank) % p
    idle = (p // 2 * i) % (p - 1)
    if rank == p - 1:
        return idle
    if rank == idle:
        return p - 1
    return (i - rank) % (p - 1)


def xor_partner(p: int, rank: int, i: int) -> int:
    """The partner of ``rank`` in round ``i`` (0-based) of the XOR pairing: rank XOR (i+1)."""
    return rank ^ (i + 1)


def _pairwise_program(call: Call, rounds: int, partner: Callable[[int, int, int], int]
                      ) -> Program:
    """One step per round, an exchange with the round's partner (none when idle), the own
    block copied in step 0.

    Zero-count messages are skipped on both sides: what ``rank`` sends to ``j``
    (``counts[j]``) is what ``j`` expects from ``rank`` (its ``recvcounts[rank]``).
    """
    p, rank = call.p, call.rank
    out, into = alltoall_blocks(call)
    steps = ProgramBuilder(rounds)
    for i in range(rounds):
        peer = partner(p, rank, i)
        if peer != rank:
            steps[i].exchange(peer, out[peer], into[peer])
    if into[rank].count:
        steps.first().copy(out[rank], into[rank])
    return steps.program()


@register(("alltoall", "alltoallv"), "pairwise", family="pairwise", options=(),
          source="All-to-all (parallel pattern)",
          cost=Cost("0 if p == 1 else p if p % 2 else p - 1", "(p - 1) * n",
                    "p(α + nβ) odd p, (p-1)(α + nβ) even p"))
def plan_pairwise_alltoall(call: Call) -> Program:
    """1-factor pairwise all-to-all(v): each round swaps one block with one partner, every
    pair of ranks meeting exactly once (the article "All-to-all (parallel pattern)").

    Rounds p for odd p (each rank idle once), p-1 for even p; bytes sent per rank (p-1)n;
    time p(alpha + n beta) for odd p, (p-1)(alpha + n beta) for even p, with no contention on
    a single-port full-duplex network.  Any p, any counts (alltoallv); no copies, no scratch.
    """
    return _pairwise_program(call, one_factor_rounds(call.p), one_factor_partner)


@register(("alltoall", "alltoallv"), "xor", family="pairwise", options=(),
          requires=(POWER_OF_TWO,),
          source="All-to-all (parallel pattern)", cost=Cost("p - 1", "(p - 1) * n", "(p-1)(α + nβ)"))
def plan_xor_alltoall(call: Call) -> Program:
    """XOR pairwise all-to-all(v): in round i rank j swaps one block with rank j XOR i
    (the article "All-to-all (parallel pattern)").

    Rounds p-1; bytes sent per rank (p-1)n; time (p-1)(alpha + n beta).  p a power of two
    (each round's pairs then stay inside sub-cubes, which suits hypercubes and fat trees);
    any counts (alltoallv); no copies, no scratch.
    """
    if call.p & (call.p - 1):
        raise ValueError(f"xor all-to-all needs p a power of two, got p={call.p}")
    return _pairwise_program(call, call.p - 1, xor_partner)
