"""Hypercube family: all-to-all in log2(p) rounds with messages combined per sub-cube
(seed 003), and the reductions by recursive doubling and halving (recursive_doubling
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

from typing import Sequence

from ..registry import POWER_OF_TWO, Cost, register
from ..schedule import (RECV, SCRATCH, SEND, Call, Copy, Program, Recv, Reduce, Region, Send,
                        Step, even_split, merge_adjacent, offsets)

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


@register("alltoall", "hypercube", family="hypercube", requires=(POWER_OF_TWO,),
          source="seed 003", cost=Cost("log2(p)", "n * p * log2(p) / 2", "log2 p (α + n·p/2·β)"))
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

    def real(self, new: int) -> int:
        """The (even, surviving) real rank of new rank ``new``."""
        return 2 * new if new < self.extra else new + self.extra

    def span(self, lo: int, hi: int) -> tuple[int, int]:
        """The real ranks [a, b) that new ranks [lo, hi) stand for."""
        return self.real(lo), (self.real(hi - 1) + (2 if hi - 1 < self.extra else 1))


def _cut(offs: tuple[int, ...], counts: tuple[int, ...], buffer: str, a: int, b: int) -> Region:
    """Blocks a..b-1 (laid end to end by ``offs``) of ``buffer`` as one region."""
    start = offs[a] if a < len(offs) else sum(counts)
    stop = offs[b] if b < len(offs) else sum(counts)
    return Region(buffer, start, stop - start)


def _steps(count: int) -> list[list]:
    """``count`` empty steps as [sends, recvs, local] lists."""
    return [[[], [], []] for _ in range(count)]


def _program(steps: list[list], scratch: int = 0) -> Program:
    return Program(tuple(Step(tuple(s), tuple(r), tuple(l)) for s, r, l in steps), scratch)


def _exchange(step: list, peer: int, out: Region, into: Region, *on_arrival) -> None:
    """Send ``out`` to ``peer`` and receive ``into`` from it, skipping empty messages."""
    if out.count:
        step[0].append(Send(peer, (out,)))
    if into.count:
        step[1].append(Recv(peer, (into,), tuple(on_arrival)))


@register("allreduce", "recursive_doubling", family="hypercube", source=_SOURCE,
          cost=Cost(_ROUNDS, f"n * ({_D} + {_FOLDED})",
                    "⌊log2 p⌋(α + nβ + nγ); p ≠ 2^k: +2α + 2nβ + nγ"))
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
    p, rank, n = call.p, call.rank, call.counts[0]
    fold = _Fold(p, rank)
    source, result = Region(call.input, 0, n), Region(RECV, 0, n)
    if n == 0 or p == 1:
        return Program(() if call.in_place or n == 0 else (Step(local=(Copy(source, result),)),))
    d = fold.rounds
    steps = _steps(fold.first + d + (1 if fold.extra else 0))
    scratch = [Region(SCRATCH, 0, n), Region(SCRATCH, n, n)]
    if fold.sits_out:
        _exchange(steps[0], rank - 1, source, Region(RECV, 0, 0))
        _exchange(steps[-1], rank - 1, Region(RECV, 0, 0), result)
        return _program(steps)
    # backwards from the result: round k reduces into held[k + 1], alternating buffers
    held = [result if (d - k) % 2 == 0 else scratch[0] for k in range(d + 1)]
    copy_back = False
    if fold.pairs:
        landing = held[0] if held[0] != source else scratch[1]
        steps[0][1].append(Recv(rank + 1, (landing,), (Reduce(held[0], (source, landing)),)))
    else:
        held[0] = source
        if held[1] == source:            # IN_PLACE, log2 p' odd: round 0 must land elsewhere
            held[1] = scratch[1]
            if d == 1:
                held[1], copy_back = scratch[0], True
    for k in range(d):
        peer = fold.real(fold.new ^ (1 << k))
        _exchange(steps[fold.first + k], peer, held[k], held[k + 1],
                  Reduce(held[k + 1], (held[k + 1], held[k])))
    if fold.pairs:
        _exchange(steps[-1], rank + 1, result, Region(RECV, 0, 0))
    if copy_back:                        # the last step is the return, or a new one
        if not fold.extra:
            steps.append([[], [], []])
        steps[-1][2].append(Copy(held[d], result))
    used = max((r.stop for r in held if r.buffer == SCRATCH), default=0)
    if fold.pairs and held[0] == source:
        used = max(used, scratch[1].stop)
    return _program(steps, used)


@register("allgather", "recursive_doubling", family="hypercube", source=_SOURCE,
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
    p, rank, counts = call.p, call.rank, call.counts
    offs = offsets(counts)
    fold = _Fold(p, rank)
    own = _cut(offs, counts, RECV, rank, rank + 1)
    source = own if call.in_place else Region(SEND, 0, counts[rank])
    copy_own = [] if call.in_place or not own.count else [Copy(source, own)]
    if p == 1:
        return Program((Step(local=tuple(copy_own)),) if copy_own else ())
    nothing = Region(RECV, 0, 0)
    steps = _steps(fold.first + fold.rounds + (1 if fold.extra else 0))
    steps[0][2] += copy_own
    if fold.sits_out:
        _exchange(steps[0], rank - 1, source, nothing)
        back = (_cut(offs, counts, RECV, 0, rank), _cut(offs, counts, RECV, rank + 1, p))
        if sum(r.count for r in back):
            steps[-1][1].append(Recv(rank - 1, merge_adjacent(back)))
        return _program(steps)
    if fold.pairs:
        _exchange(steps[0], rank + 1, nothing, _cut(offs, counts, RECV, rank + 1, rank + 2))
    for k in range(fold.rounds):
        mask = 1 << k
        mine = fold.new & ~(mask - 1)
        theirs = mine ^ mask
        out = _cut(offs, counts, RECV, *fold.span(mine, mine + mask))
        if k == 0 and not fold.pairs:
            out = source
        into = _cut(offs, counts, RECV, *fold.span(theirs, theirs + mask))
        _exchange(steps[fold.first + k], fold.real(fold.new ^ mask), out, into)
    if fold.pairs:
        back = (_cut(offs, counts, RECV, 0, rank + 1), _cut(offs, counts, RECV, rank + 2, p))
        if sum(r.count for r in back):
            steps[-1][0].append(Send(rank + 1, merge_adjacent(back)))
    return _program(steps)


def _halving(fold: _Fold, counts: tuple[int, ...], held: Region, accumulate: Region,
             landing: int, last_into: list[Region] | None, steps: list[list]) -> None:
    """The log2 p' rounds of a recursive-halving reduce-scatter over the p' blocks
    ``counts`` (one per new rank, laid end to end) of the vector in ``held``, reducing into
    the vector ``accumulate`` (same layout; may be ``held``).  In round k (mask p'/2^(k+1))
    new rank j sends the half of its current window that it does not keep to j XOR mask and
    reduces what comes back into the half it keeps; afterwards block j is fully reduced, in
    ``accumulate`` or, if given, in the regions ``last_into`` (laid end to end) that the last
    round reduces into instead.  Arrivals land in scratch at ``landing``."""
    offs = offsets(counts)

    def part(vector: Region, lo: int, hi: int) -> Region:
        block = _cut(offs, counts, vector.buffer, lo, hi)
        return Region(vector.buffer, vector.offset + block.offset, block.count)

    j = fold.new
    for k in range(fold.rounds):
        mask = fold.size >> (k + 1)
        keep_lo = j & ~(mask - 1)
        give_lo = keep_lo ^ mask
        mine, keep = part(held, keep_lo, keep_lo + mask), part(accumulate, keep_lo, keep_lo + mask)
        slot = Region(SCRATCH, landing, keep.count)
        targets = last_into if k == fold.rounds - 1 and last_into is not None else [keep]
        ops, at = [], 0
        for dst in targets:
            if dst.count:
                ops.append(Reduce(dst, (mine.sub(at, dst.count), slot.sub(at, dst.count))))
            at += dst.count
        _exchange(steps[fold.first + k], fold.real(j ^ mask), part(held, give_lo, give_lo + mask),
                  slot, *ops)
        held = accumulate


@register("reduce_scatter", "recursive_halving", family="hypercube", source=_SOURCE,
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
    offs = offsets(counts)
    fold = _Fold(p, rank)
    result = Region(RECV, 0, counts[rank])
    if p == 1:
        return Program((Step(local=(Copy(Region(SEND, 0, total), result),)),) if total else ())
    steps = _steps(fold.first + fold.rounds + (1 if fold.extra else 0))
    if fold.sits_out:
        _exchange(steps[0], rank - 1, Region(SEND, 0, total), Region(RECV, 0, 0))
        _exchange(steps[-1], rank - 1, Region(RECV, 0, 0), result)
        return _program(steps)
    vector = Region(SCRATCH, 0, total)
    held = Region(SEND, 0, total)
    last_into = [result]
    if fold.pairs:
        _exchange(steps[0], rank + 1, Region(RECV, 0, 0), vector,
                  Reduce(vector, (vector, held)))
        held = vector
        second = _cut(offs, counts, SCRATCH, rank + 1, rank + 2)
        last_into.append(second)
        _exchange(steps[-1], rank + 1, second, Region(RECV, 0, 0))
    spans = [fold.span(j, j + 1) for j in range(fold.size)]
    new_counts = tuple(sum(counts[a:b]) for a, b in spans)
    _halving(fold, new_counts, held, vector, total, last_into, steps)
    return _program(steps, total + _half(new_counts, fold))


def _half(counts: tuple[int, ...], fold: _Fold) -> int:
    """The largest window half any new rank receives in a halving round (round 0)."""
    half = fold.size // 2
    return max(sum(counts[:half]), sum(counts[half:])) if half else 0


@register("allreduce", "rabenseifner", family="hypercube",
          source="Rabenseifner 2004; Thakur, Rabenseifner & Gropp 2005",
          # rank 0 (largest blocks of even_split(n, p')): halves given away, then its groups
          cost=Cost(f"2 * {_D} + 2 * {_FOLDED}",
                    f"n - ceil(n / {_P}) + ({_P} - 1) * floor(n / {_P}) "
                    f"+ {_sum_min(f'(n % {_P})')} + n * {_FOLDED}",
                    "2⌊log2 p⌋α + 2(p'-1)/p'·nβ + (p'-1)/p'·nγ; p ≠ p': +2α + 2nβ + nγ"))
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
    p, rank, n = call.p, call.rank, call.counts[0]
    fold = _Fold(p, rank)
    source, result = Region(call.input, 0, n), Region(RECV, 0, n)
    if n == 0 or p == 1:
        return Program(() if call.in_place or n == 0 else (Step(local=(Copy(source, result),)),))
    d = fold.rounds
    steps = _steps(fold.first + 2 * d + (1 if fold.extra else 0))
    nothing = Region(RECV, 0, 0)
    if fold.sits_out:
        _exchange(steps[0], rank - 1, source, nothing)
        _exchange(steps[-1], rank - 1, nothing, result)
        return _program(steps)
    counts = even_split(n, fold.size)
    offs = offsets(counts)
    scratch = _half(counts, fold)
    held = source
    if fold.pairs:
        landing = result if not call.in_place else Region(SCRATCH, 0, n)
        scratch = max(scratch, landing.stop if landing.buffer == SCRATCH else 0)
        _exchange(steps[0], rank + 1, nothing, landing, Reduce(result, (source, landing)))
        held = result
        _exchange(steps[-1], rank + 1, result, nothing)
    _halving(fold, counts, held, result, 0, None, steps)
    j = fold.new
    for k in range(d):
        mask = 1 << k
        mine = j & ~(mask - 1)
        theirs = mine ^ mask
        _exchange(steps[fold.first + d + k], fold.real(j ^ mask),
                  _cut(offs, counts, RECV, mine, mine + mask),
                  _cut(offs, counts, RECV, theirs, theirs + mask))
    return _program(steps, scratch)
