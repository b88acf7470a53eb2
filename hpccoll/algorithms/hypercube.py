"""Hypercube family: all-to-all in log2(p) rounds with messages combined per sub-cube
(the article "All-to-all (parallel pattern)"), and the reductions by recursive doubling and halving (recursive_doubling
allreduce and allgather, recursive_halving reduce-scatter, Rabenseifner's allreduce) with the
standard folding of non-power-of-two p.

The block-relaying machinery here (:func:`relay_program`) is shared with
:mod:`hpccoll.algorithms.bruck`: both algorithms move every block under an *index* that is the
same on every rank it passes through (``src XOR dst`` here, the hop distance ``dst - src`` in
Bruck's), so a round's message is "the blocks of these indices", listed in the same order by
sender and receiver.  Cost notation as in :mod:`hpccoll.algorithms.ring` (n the bytes sent to
one peer).
"""

from __future__ import annotations

from collections import Counter
from typing import Callable, Sequence

from ..registry import POWER_OF_TWO, Cost, register
from ..schedule import (RECV, SCRATCH, SEND, Call, Program, ProgramBuilder, Reduce, Region,
                        allgather_blocks, allreduce_vectors, blocks, even_part, merge_adjacent,
                        offsets, one_rank, reduce_scatter_blocks, span)

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
    if n == 0:
        return Program(())
    moves = Counter(i for channels in rounds for _, _, indices in channels for i in indices)
    slot = {i: k * n for k, i in enumerate(i for i in range(len(source)) if moves[i] >= 2)}
    where, done = list(source), Counter()
    steps = ProgramBuilder()
    for channels in rounds:
        step = steps.step()
        for to, frm, indices in channels:
            step.send(to, *merge_adjacent(where[i] for i in indices))
            for i in indices:
                done[i] += 1
                where[i] = final[i] if (moves[i] - done[i]) % 2 == 0 \
                    else Region(SCRATCH, slot[i], n)
            step.recv(frm, *merge_adjacent(where[i] for i in indices))
    for i, block in enumerate(source):
        if not moves[i]:
            steps.first().copy(block, final[i])
    return steps.program(scratch=len(slot) * n)


HYPERCUBE_ALLTOALL_COST = Cost("log2(p)", "n * p * log2(p) / 2", "log2 p (α + n·p/2·β)")


@register("alltoall", "hypercube", family="hypercube", options=(), requires=(POWER_OF_TWO,),
          source="All-to-all (parallel pattern)", cost=HYPERCUBE_ALLTOALL_COST)
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
    mine, result = blocks(SEND, (n,) * p), blocks(RECV, (n,) * p)
    source = [mine[rank ^ t] for t in range(p)]
    final = [result[rank ^ t] for t in range(p)]
    rounds = []
    for k in range(p.bit_length() - 1):
        bit = 1 << k
        partner = rank ^ bit
        rounds.append([(partner, partner, [t for t in range(p) if t & bit])])
    return relay_program(n, rounds, source, final)


# ------------------------------------------------------------------------------ reductions
#
# Recursive doubling, recursive halving and Rabenseifner's allreduce (Thakur, Rabenseifner,
# Gropp 2005).  Any p: with p' = 2^floor(log2 p) and r = p - p', the first 2r ranks pair up
# (2i, 2i+1); in an extra first step each odd one folds its data into its even partner and
# sits out, the p' survivors ("new ranks": 2i -> i for i < r, rank -> rank - r beyond) run
# the power-of-two algorithm, and in an extra last step each even partner sends the odd one
# its result.  New rank j stands for the real ranks 2j, 2j+1 (j < r) or j + r, so a
# contiguous range of new ranks stands for a contiguous range of real ranks.

# Cost formulas (see registry.Cost), composed from: d = log2 p', p' and r = p - p'
_D = "floor(log2(p))"
_P = f"2 ** {_D}"
_R = f"(p - {_P})"
_FOLDED = f"(p > {_P})"                    # 1 when p is not a power of two


def _sum_min(m: str) -> str:
    """sum(min(2^k, m) for k < d) for 0 <= m < p', in closed form."""
    q = f"floor(log2(max(1, {m})))"
    return f"({m} > 0) * (2 ** ({q} + 1) - 1 + {m} * ({_D} - 1 - {q}))"


_ROUNDS = f"{_D} + 2 * {_FOLDED}"
_SOURCE = "Thakur, Rabenseifner & Gropp 2005"


class _Fold:
    """The non-power-of-two reduction to p' = 2^floor(log2 p) survivors, seen from ``rank``."""

    def __init__(self, p: int, rank: int) -> None:
        self.size = 1 << (p.bit_length() - 1)
        self.extra = p - self.size
        self.rounds = self.size.bit_length() - 1
        self.sits_out = rank < 2 * self.extra and rank % 2 == 1     # folds into rank - 1
        self.pairs = rank < 2 * self.extra and rank % 2 == 0        # absorbs rank + 1
        self.new = None if self.sits_out else \
            rank // 2 if rank < 2 * self.extra else rank - self.extra
        self.first = 1 if self.extra else 0                         # step of round 0

    def builder(self, rounds: int) -> ProgramBuilder:
        """The steps of the fold, ``rounds`` rounds and the return."""
        return ProgramBuilder(self.first + rounds + (1 if self.extra else 0))

    def real(self, new: int) -> int:
        """The (even, surviving) real rank of new rank ``new``."""
        return 2 * new if new < self.extra else new + self.extra

    def ranks(self, lo: int, hi: int) -> tuple[int, int]:
        """The real ranks [a, b) that new ranks [lo, hi) stand for."""
        return self.real(lo), (self.real(hi - 1) + (2 if hi - 1 < self.extra else 1))


def _sit_out(steps: ProgramBuilder, partner: int, given: Region, *returned: Region
             ) -> Program:
    """The program of a rank that sits out: it gives ``given`` to ``partner`` in the first
    step and gets ``returned`` back in the last."""
    steps[0].send(partner, given)
    steps[-1].recv(partner, *returned)
    return steps.program()


def _doubling(fold: _Fold, steps: ProgramBuilder, start: int,
              group: Callable[[int, int], Region]) -> None:
    """The log2 p' rounds of a recursive-doubling allgather, from step ``start`` on: in round
    k new rank j swaps ``group(lo, lo + 2^k)``, the blocks of its aligned group of 2^k new
    ranks, for its partner j XOR 2^k's."""
    j = fold.new
    for k in range(fold.rounds):
        mask = 1 << k
        mine = j & ~(mask - 1)
        theirs = mine ^ mask
        steps[start + k].exchange(fold.real(j ^ mask), group(mine, mine + mask),
                                  group(theirs, theirs + mask))


# a surviving rank's part of a folded allreduce: (call, fold, steps, input, result) -> scratch
_Survivor = Callable[[Call, _Fold, ProgramBuilder, Region, Region], int]


def _folded_allreduce(call: Call, phases: int, survivor: _Survivor) -> Program:
    """An allreduce by a power-of-two algorithm of ``phases`` times log2 p' rounds, folded
    (see above): a copy on one rank, nothing for an empty vector, the fold and the return
    for a rank that sits out; for the others ``survivor`` fills in the fold, the rounds and
    the return and gives the scratch they use."""
    source, result = allreduce_vectors(call)
    if not result.count or call.p == 1:
        return one_rank(source, result)
    fold = _Fold(call.p, call.rank)
    steps = fold.builder(phases * fold.rounds)
    if fold.sits_out:
        return _sit_out(steps, call.rank - 1, source, result)
    return steps.program(survivor(call, fold, steps, source, result))


DOUBLING_ALLREDUCE_COST = Cost(_ROUNDS, f"n * ({_D} + {_FOLDED})",
                               "⌊log2 p⌋(α + nβ + nγ); p ≠ 2^k: +2α + 2nβ + nγ")


@register("allreduce", "recursive_doubling", family="hypercube", options=(), source=_SOURCE,
          cost=DOUBLING_ALLREDUCE_COST)
def plan_recursive_doubling_allreduce(call: Call) -> Program:
    """Recursive-doubling allreduce: in round k each rank swaps its whole partial vector
    with rank XOR 2^k and reduces.

    Rounds log2 p' (+2 when p is not a power of two: the fold and the return, see above);
    bytes sent per rank n per round; time log2 p' (alpha + n beta + n gamma), plus
    2 alpha + 2 n beta + n gamma for the fold and return.  Latency-optimal, for short
    vectors.  Any p, IN_PLACE.  Each round lands in the buffer the previous one did not
    send from and reduces there, alternating so that the last lands in the result; scratch n
    (2n with IN_PLACE when log2 p' is odd and at least 3; IN_PLACE with p' = 2 ends with a
    local copy from scratch).
    """
    return _folded_allreduce(call, 1, _doubling_allreduce)


def _doubling_allreduce(call: Call, fold: _Fold, steps: ProgramBuilder, source: Region,
                        result: Region) -> int:
    """A surviving rank's recursive-doubling allreduce (see :func:`_folded_allreduce`)."""
    rank, n, d = call.rank, result.count, fold.rounds
    scratch = [Region(SCRATCH, 0, n), Region(SCRATCH, n, n)]
    # backwards from the result: round k reduces into held[k + 1], alternating buffers
    held = [result if (d - k) % 2 == 0 else scratch[0] for k in range(d + 1)]
    copy_back = False
    if fold.pairs:
        landing = held[0] if held[0] != source else scratch[1]
        steps[0].recv(rank + 1, landing, on_arrival=(Reduce(held[0], (source, landing)),))
    else:
        held[0] = source
        if held[1] == source:            # IN_PLACE, log2 p' odd: round 0 must land elsewhere
            held[1] = scratch[1]
            if d == 1:
                held[1], copy_back = scratch[0], True
    for k in range(d):      # the lower half's data first on both sides: the same bits
        terms = (held[k + 1], held[k]) if fold.new >> k & 1 else (held[k], held[k + 1])
        steps[fold.first + k].exchange(fold.real(fold.new ^ (1 << k)), held[k], held[k + 1],
                                       Reduce(held[k + 1], terms))
    if fold.pairs:
        steps[-1].send(rank + 1, result)
    if copy_back:                        # the last step is the return, or a new one
        (steps[-1] if fold.extra else steps.step()).copy(held[d], result)
    used = max((r.stop for r in held if r.buffer == SCRATCH), default=0)
    if fold.pairs and held[0] == source:
        used = max(used, scratch[1].stop)
    return used


def folded_allgather(call: Call) -> Program | tuple[_Fold, list, Region, ProgramBuilder]:
    """What every folded allgather (recursive doubling's, Swing's) starts with: the finished
    program where this rank has nothing more to do (one rank; an odd rank that folds its
    block into its even partner and gets everything back last), else (fold, result blocks,
    source, steps) with the own block copied into place and, on an even rank with a
    partner, the partner's block received in the first step."""
    p, rank = call.p, call.rank
    fold = _Fold(p, rank)
    result, source = allgather_blocks(call)
    own = result[rank]
    if p == 1:
        return one_rank(source, own)
    steps = fold.builder(fold.rounds)
    steps[0].copy(source, own)
    if fold.sits_out:
        return _sit_out(steps, rank - 1, source,
                        *merge_adjacent((span(result, 0, rank), span(result, rank + 1, p))))
    if fold.pairs:
        steps[0].recv(rank + 1, result[rank + 1])
    return fold, result, source, steps


@register("allgather", "recursive_doubling", family="hypercube", options=(), source=_SOURCE,
          # rank 0: its groups' blocks (2^k + min(2^k, r) in round k), then all but one back
          cost=Cost(_ROUNDS, f"n * (p - 1) + {_FOLDED} * n * ({_P} - 1 + {_sum_min(_R)})",
                    "⌊log2 p⌋α + (p-1)nβ; p ≠ 2^k: +2α + pnβ and more on the pairs"))
def plan_recursive_doubling_allgather(call: Call) -> Program:
    """Recursive-doubling allgather: in round k each rank swaps everything it has gathered
    (its aligned group of 2^k ranks' blocks, one contiguous region) with rank XOR 2^k.

    Rounds log2 p' (+2 when p is not a power of two: the odd ranks' blocks are folded into
    their even partners first and everything but their own block is sent back last); bytes
    received per rank N - n_own (N = all blocks), in messages doubling in size; time
    log2 p' alpha + (p'-1)/p' N beta (+ 2 alpha + (n_odd + N) beta).  Uneven blocks, any p,
    IN_PLACE; no scratch, no packing.
    """
    started = folded_allgather(call)
    if isinstance(started, Program):
        return started
    fold, result, source, steps = started
    p, rank = call.p, call.rank

    def group(lo: int, hi: int) -> Region:
        """The blocks of new ranks lo..hi-1; this rank's alone straight from its input."""
        if (lo, hi) == (fold.new, fold.new + 1) and not fold.pairs:
            return source
        return span(result, *fold.ranks(lo, hi))
    _doubling(fold, steps, fold.first, group)
    if fold.pairs:
        steps[-1].send(rank + 1,
                       *merge_adjacent((span(result, 0, rank + 1), span(result, rank + 2, p))))
    return steps.program()


# Where block i of a vector cut into blocks laid end to end starts, for i = 0 .. blocks
# (edges(blocks) is the vector's length): a rank's rounds touch O(log p) windows of blocks,
# so a planner that looks edges up (in closed form for an even split) plans in O(log p).
Edges = Callable[[int], int]


def even_edges(n: int, parts: int) -> Edges:
    """The edges of ``n`` elements cut into ``parts`` blocks by :func:`even_split`."""
    return lambda i: even_part(n, parts, i)[0]


def window(vector: Region, edges: Edges, lo: int, hi: int) -> Region:
    """Blocks ``lo`` to ``hi - 1`` of ``vector`` (cut at ``edges``) as one region."""
    return vector.sub(edges(lo), edges(hi) - edges(lo))


def _halving(fold: _Fold, edges: Edges, held: Region, accumulate: Region,
             landing: int, last_into: list[Region] | None, steps: ProgramBuilder) -> None:
    """The log2 p' rounds of a recursive-halving reduce-scatter over the p' blocks cut at
    ``edges`` (one per new rank, laid end to end) of the vector in ``held``, reducing into
    the vector ``accumulate`` (same layout; may be ``held``).  In round k (mask p'/2^(k+1))
    new rank j sends the half of its current window that it does not keep to j XOR mask and
    reduces what comes back into the half it keeps; afterwards block j is fully reduced, in
    ``accumulate`` or, if given, in the regions ``last_into`` (laid end to end) that the last
    round reduces into instead.  Arrivals land in scratch at ``landing``."""
    j = fold.new
    for k in range(fold.rounds):
        mask = fold.size >> (k + 1)
        keep_lo = j & ~(mask - 1)
        give_lo = keep_lo ^ mask
        mine = window(held, edges, keep_lo, keep_lo + mask)
        keep = window(accumulate, edges, keep_lo, keep_lo + mask)
        slot = Region(SCRATCH, landing, keep.count)
        targets = last_into if k == fold.rounds - 1 and last_into is not None else [keep]
        ops, at = [], 0
        for dst in targets:
            ops.append(Reduce(dst, (mine.sub(at, dst.count), slot.sub(at, dst.count))))
            at += dst.count
        give = window(held, edges, give_lo, give_lo + mask)
        steps[fold.first + k].exchange(fold.real(j ^ mask), give, slot, *ops)
        held = accumulate


@register("reduce_scatter", "recursive_halving", family="hypercube", options=(), source=_SOURCE,
          cost=Cost(_ROUNDS, f"n * (p - 1 + {_FOLDED})",
                    "⌊log2 p⌋α + (p-1)n(β + γ); p ≠ 2^k: +2α + pn(β + γ) + nβ"))
def plan_recursive_halving_reduce_scatter(call: Call) -> Program:
    """Recursive-halving reduce-scatter: in round k each rank sends rank XOR p'/2^(k+1) the
    half of its current window of blocks that the partner keeps and reduces the other half.

    Rounds log2 p' (+2 when p is not a power of two: each odd rank of the first 2r folds its
    whole vector into its even partner first, which sends it its block last); bytes sent
    per rank (p'-1)/p' N for N the whole vector (halves of shrinking windows; uneven blocks
    make them uneven); time log2 p' alpha + (p'-1)/p' N (beta + gamma), plus
    2 alpha + N (beta + gamma) + n beta for the fold and return.  Uneven recvcounts, any p.
    Scratch 3N/2 at most: the partial sums (in the vector's layout) and a landing area for
    the largest half received.
    """
    p, rank, counts = call.p, call.rank, call.counts
    total = sum(counts)
    fold = _Fold(p, rank)
    _, result = reduce_scatter_blocks(call)
    held = Region(SEND, 0, total)
    if p == 1:
        return one_rank(held, result)
    steps = fold.builder(fold.rounds)
    if fold.sits_out:
        return _sit_out(steps, rank - 1, held, result)
    vector = Region(SCRATCH, 0, total)
    last_into = [result]
    edges = (*offsets(counts), total)
    if fold.pairs:
        steps[0].recv(rank + 1, vector, on_arrival=(Reduce(vector, (vector, held)),))
        held = vector
        second = vector.sub(edges[rank + 1], counts[rank + 1])
        last_into.append(second)
        steps[-1].send(rank + 1, second)
    new_edges = [edges[fold.real(j)] for j in range(fold.size)] + [total]
    _halving(fold, new_edges.__getitem__, held, vector, total, last_into, steps)
    return steps.program(total + _half(new_edges.__getitem__, fold))


def _half(edges: Edges, fold: _Fold) -> int:
    """The largest window half any new rank receives in a halving round (round 0)."""
    half = fold.size // 2
    return max(edges(half) - edges(0), edges(fold.size) - edges(half)) if half else 0


# rank 0 (largest blocks of even_split(n, p')): halves given away, then its groups
RABENSEIFNER_COST = Cost(f"2 * {_D} + 2 * {_FOLDED}",
                         f"n - ceil(n / {_P}) + ({_P} - 1) * floor(n / {_P}) "
                         f"+ {_sum_min(f'(n % {_P})')} + n * {_FOLDED}",
                         "2⌊log2 p⌋α + 2(p'-1)/p'·nβ + (p'-1)/p'·nγ; p ≠ p': +2α + 2nβ + nγ")


@register("allreduce", "rabenseifner", family="hypercube", options=(),
          source="Rabenseifner 2004; Thakur, Rabenseifner & Gropp 2005", cost=RABENSEIFNER_COST)
def plan_rabenseifner_allreduce(call: Call) -> Program:
    """Rabenseifner's allreduce: recursive-halving reduce-scatter of p' blocks, then
    recursive-doubling allgather of the reduced blocks.

    Rounds 2 log2 p' (+2 when p is not a power of two: the fold of the whole vector and its
    return, see above); bytes sent per rank 2(p'-1)/p' n; time 2 log2 p' alpha
    + 2(p'-1)/p' n beta + (p'-1)/p' n gamma, plus 2 alpha + 2 n beta + n gamma for the fold
    and return.  Bandwidth-optimal for p a power of two, for long vectors.  Any p, IN_PLACE;
    the reduced halves accumulate in the receive buffer, arrivals land in scratch (n/2; n on
    folding ranks with IN_PLACE).
    """
    return _folded_allreduce(call, 2, _rabenseifner_allreduce)


def _rabenseifner_allreduce(call: Call, fold: _Fold, steps: ProgramBuilder, source: Region,
                            result: Region) -> int:
    """A surviving rank's part of Rabenseifner's allreduce (see :func:`_folded_allreduce`)."""
    rank, n = call.rank, result.count
    edges = even_edges(n, fold.size)
    scratch = _half(edges, fold)
    held = source
    if fold.pairs:
        landing = result if not call.in_place else Region(SCRATCH, 0, n)
        scratch = max(scratch, landing.stop if landing.buffer == SCRATCH else 0)
        steps[0].recv(rank + 1, landing, on_arrival=(Reduce(result, (source, landing)),))
        held = result
        steps[-1].send(rank + 1, result)
    _halving(fold, edges, held, result, 0, None, steps)
    _doubling(fold, steps, fold.first + fold.rounds,
              lambda lo, hi: window(result, edges, lo, hi))
    return scratch
