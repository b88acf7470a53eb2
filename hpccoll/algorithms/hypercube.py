"""Hypercube all-to-all: log2(p) rounds, messages combined per sub-cube (seed 003).

The block-relaying machinery here (:func:`relay_program`) is shared with
:mod:`hpccoll.algorithms.bruck`: both algorithms move every block under an *index* that is the
same on every rank it passes through (``src XOR dst`` here, the hop distance ``dst - src`` in
Bruck's), so a round's message is "the blocks of these indices", listed in the same order by
sender and receiver.  Cost notation as in :mod:`hpccoll.algorithms.ring` (n the bytes sent to
one peer).
"""

from __future__ import annotations

from typing import Sequence

from ..registry import POWER_OF_TWO, register
from ..schedule import (RECV, SCRATCH, SEND, Call, Copy, Program, Recv, Region, Send, Step,
                        merge_adjacent)

Channel = tuple[int, int, Sequence[int]]   # (send to, receive from, block indices carried)


def relay_program(n: int, rounds: list[list[Channel]], source: list[Region],
                  final: list[Region]) -> Program:
    """Blocks relayed rank to rank under invariant indices, in place where possible.

    Block index i starts at ``source[i]`` (the send buffer) and ends at ``final[i]`` (the
    receive buffer).  In each round, each channel ``(to, frm, indices)`` sends the blocks of
    ``indices`` to ``to`` and receives the blocks of the same indices from ``frm`` (the peer
    lists them in the same order), one message each way, several regions packed by the
    executor.  A block that moves m times lands, on its j-th move, in ``final[i]`` when
    m - j is even and in a scratch slot of its own otherwise: consecutive moves alternate
    between the two (so a block is never received where it is being sent from), the last
    move lands in place, the first is sent straight from the send buffer, and only blocks
    that move twice or more need scratch.  Blocks that never move are copied in step 0.
    """
    p = len(source)
    if n == 0:
        return Program(())
    moves = [0] * p
    for channels in rounds:
        for _, _, indices in channels:
            for i in indices:
                moves[i] += 1
    slot: dict[int, int] = {}
    for i in range(p):
        if moves[i] >= 2:
            slot[i] = len(slot) * n
    where, done = list(source), [0] * p
    steps = []
    for channels in rounds:
        sends, recvs = [], []
        for to, frm, indices in channels:
            if not indices:
                continue
            sends.append(Send(to, merge_adjacent(where[i] for i in indices)))
            for i in indices:
                done[i] += 1
                where[i] = final[i] if (moves[i] - done[i]) % 2 == 0 \
                    else Region(SCRATCH, slot[i], n)
            recvs.append(Recv(frm, merge_adjacent(where[i] for i in indices)))
        steps.append(Step(tuple(sends), tuple(recvs)))
    local = tuple(Copy(source[i], final[i]) for i in range(p) if moves[i] == 0)
    if local:
        first = steps[0] if steps else Step()
        steps[:1] = [Step(first.sends, first.recvs, local)]
    return Program(tuple(steps), scratch=len(slot) * n)


@register("alltoall", "hypercube", family="hypercube", requires=(POWER_OF_TWO,))
def plan_hypercube_alltoall(call: Call) -> Program:
    """Hypercube all-to-all: in round k each rank sends its partner rank XOR 2^k, in one
    message, every block it holds that is bound for the partner's half of the sub-cube.

    Rounds log2 p; bytes sent per rank n p/2 per round, n p log2(p)/2 in all; time
    log2(p) (alpha + n p/2 beta) plus packing (the executor gathers each round's p/2 blocks
    into one message and scatters the arrival).  p a power of two.  A block (src, dst) sits
    at index src XOR dst on every rank it visits; it is sent straight from the send buffer,
    lands in its place in the receive buffer on its last move, and alternates between that
    place and scratch before: scratch (p - 1 - log2 p) n at most.
    """
    p, rank, n = call.p, call.rank, call.counts[0]
    if p & (p - 1):
        raise ValueError(f"hypercube all-to-all needs p a power of two, got p={p}")
    source = [Region(SEND, (rank ^ t) * n, n) for t in range(p)]
    final = [Region(RECV, (rank ^ t) * n, n) for t in range(p)]
    rounds = []
    for k in range(p.bit_length() - 1):
        bit = 1 << k
        partner = rank ^ bit
        rounds.append([(partner, partner, [t for t in range(p) if t & bit])])
    return relay_program(n, rounds, source, final)
