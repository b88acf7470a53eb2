"""Swing (the paper "Swing: Short-cutting Rings for Higher Bandwidth Allreduce", NSDI'24):
allreduce, reduce-scatter and allgather whose step-s peer is rank r + rho(s) for even r and
r - rho(s) for odd r, rho(s) = sum_{i<=s} (-2)^i = 1, -1, 3, -5, 11, ...

Recursive doubling talks to rank r XOR 2^s, up to p/2 ranks away; Swing's peers "swing"
left and right around the ring and are at most about 2^(s+1)/3 ranks away, which on a torus
(ranks laid along a ring of each dimension) cuts the distance, and so the links, a message
crosses.  The data each rank owns after each step of a Swing reduce-scatter is a set of
ranks (those it reaches by the remaining steps); for p a power of two these sets halve
every step and partition the ranks as recursive halving's windows do, but they are not
contiguous.  The allreduce places the blocks so that they are: block v belongs to the rank
whose *position* is v, where position bit d-1-s says which half of the step-s set the rank
keeps (the paper's remapping of blocks), and then runs Rabenseifner's halving and doubling
(:mod:`hpccoll.algorithms.hypercube`) with Swing's peers.  The reduce-scatter and allgather,
whose blocks belong to fixed ranks, send the sets' blocks as they lie (several regions
packed into one message).

Any p: p' = 2^floor(log2 p) ranks run Swing, the others fold into them first and get the
result back last, the standard reduction to a power of two that hypercube's algorithms use
(pico, the paper authors' library, handles Swing's non-powers of two the same way).

Multi-dimensional tori (the allreduce with option ``dims``, "AxB[xC...]" or a tuple, each a
power of two, multiplying to p; ranks numbered with the first dimension varying fastest, as
``hpccoll simulate``'s ``torus:dims=...``): hpccoll's topologies name nodes, racks and pods,
not torus coordinates, so the option declares them.  The vector is cut into 2D parts for
D dimensions, and 2D Swing allreduces run at once, one per dimension and direction: part i
(and its mirror D + i, whose even coordinates step by -rho and odd by +rho) takes its steps
round-robin over the dimensions from dimension i, step t of a dimension moving the coordinate
there by its Swing distance rho(t).  In each step the 2D parts use the 2D links of a node
(+ and - in every dimension) at once, each carrying 1/(2D) of the data, as the paper's
multiport form does.  Steps on different dimensions commute, so a part's sets are products of
per-dimension Swing sets, and position bits taken per step keep every message one region.
Cost notation as in :mod:`hpccoll.algorithms.ring` (n the vector, or one rank's block).
"""

from __future__ import annotations

import functools
import math

from ..registry import Constraint, Cost, Option, register
from ..schedule import (SCRATCH, SEND, Call, Program, ProgramBuilder, Reduce, Region,
                        allreduce_vectors, even_split, merge_adjacent, one_rank, parallel,
                        reduce_scatter_blocks, relocate, span, split)
from .hypercube import (DOUBLING_ALLREDUCE_COST, RABENSEIFNER_COST, _FOLDED, _P, _ROUNDS, _Fold,
                        _doubling_allreduce, _folded_allreduce, _rabenseifner_allreduce,
                        _sit_out, folded_allgather)

_SOURCE = "Swing: Short-cutting Rings for Higher Bandwidth Allreduce (NSDI'24)"


def rho(step: int) -> int:
    """Swing's step-``step`` distance: sum_{i<=step} (-2)^i."""
    return (1 - (-2) ** (step + 1)) // 3


def swing_peer(rank: int, step: int, size: int) -> int:
    """The step-``step`` peer of ``rank`` among ``size`` ranks: r + rho for even r, r - rho
    for odd r (mod size)."""
    return (rank + rho(step) if rank % 2 == 0 else rank - rho(step)) % size


@functools.lru_cache(maxsize=4096)
def reached(size: int, rank: int, step: int) -> tuple[int, ...]:
    """The ranks ``rank`` reaches by Swing steps ``step``, ``step`` + 1, ... (``size`` a power
    of two), sorted: the blocks it still owns before reduce-scatter step ``step``."""
    if 1 << step >= size:
        return (rank,)
    return tuple(sorted(reached(size, rank, step + 1)
                        + reached(size, swing_peer(rank, step, size), step + 1)))


def swing_position(size: int, rank: int) -> int:
    """``rank``'s position among ``size`` (a power of two): bit d-1-s is 1 when the step-s
    set it keeps is the one of the two with the larger least rank.  The sets a rank owns
    after step s are then the aligned ranges of 2^(d-1-s) positions holding its own."""
    steps = size.bit_length() - 1
    return sum(1 << (steps - 1 - s) for s in range(steps)
               if reached(size, rank, s + 1)[0]
               > reached(size, swing_peer(rank, s, size), s + 1)[0])


@functools.lru_cache(maxsize=64)
def swing_positions(size: int) -> tuple[int, ...]:
    """Every rank's :func:`swing_position` among ``size`` (a power of two)."""
    return tuple(swing_position(size, r) for r in range(size))


def swing_pairs(p: int) -> int:
    """The most folded pairs' blocks one pair survivor sends in a Swing allgather: over the
    survivors j < r (standing for two ranks), the pairs among the sets it sends, summed over
    the steps (the cost formula's term for non-powers of two)."""
    fold = _Fold(p, 0)
    return max((sum(sum(1 for x in reached(fold.size, j, s + 1) if x < fold.extra)
                    for s in range(fold.rounds)) for j in range(fold.extra)), default=0)


class _SwingFold(_Fold):
    """Hypercube's fold with the survivors in Swing's numbering, for hypercube's halving and
    doubling rounds: ``new`` is this rank's position (bit-reversed for ``latency``, so that
    step s flips bit s), and ``real(new ^ bit)`` the real rank of its Swing peer at the step
    that flips ``bit``."""

    def __init__(self, p: int, rank: int, latency: bool) -> None:
        super().__init__(p, rank)
        if self.new is None:
            return
        node, d = self.new, self.rounds
        position = swing_position(self.size, node)
        if latency:
            position = int(format(position, f"0{d}b")[::-1], 2) if d else 0
        self.peers = {1 << (s if latency else d - 1 - s):
                      _Fold.real(self, swing_peer(node, s, self.size)) for s in range(d)}
        self.new = position

    def real(self, new: int) -> int:
        return self.peers[new ^ self.new]


def _in_swing_numbering(survivor, latency: bool):
    """A surviving rank's part of a hypercube allreduce run with Swing's peers."""
    def run(call: Call, fold: _Fold, steps, source: Region, result: Region) -> int:
        return survivor(call, _SwingFold(call.p, call.rank, latency), steps, source, result)
    return run


def parse_dims(value) -> tuple[int, ...] | None:
    """The torus dimensions "AxB..." or a tuple spells, each a power of two (None if not)."""
    dims: tuple[int, ...] = ()
    if isinstance(value, str) and all(d.isdigit() for d in value.lower().split("x")):
        dims = tuple(int(d) for d in value.lower().split("x"))
    elif isinstance(value, tuple) and all(type(d) is int for d in value):
        dims = value
    return dims if dims and all(d >= 1 and d & (d - 1) == 0 for d in dims) else None


def torus_dims(call: Call) -> tuple[int, ...] | None:
    """The torus the option ``dims`` declares (None when it is not given); ValueError unless
    it is "AxB..." or a tuple of powers of two multiplying to p."""
    value = call.option("dims")
    if value is None:
        return None
    dims = parse_dims(value)
    if dims is None or math.prod(dims) != call.p:
        raise ValueError(f"option dims must be AxB... (powers of two) multiplying to p={call.p}, "
                         f"got {value!r}")
    return dims


DIMS = Option("dims", '"AxB..." or a tuple of powers of two', "none (one Swing over the ranks)",
              "the torus the ranks form, the first dimension varying fastest",
              lambda value: parse_dims(value) is not None)
ON_TORUS = Constraint("option dims multiplies to p",
                      lambda c: c.option("dims") is None or math.prod(parse_dims(c.option("dims"))
                                                                      or (0,)) == c.p)


class _TorusPart:
    """One of the 2D Swing allreduces on a torus, seen from ``rank``, in the interface of
    hypercube's halving and doubling rounds (as :class:`_SwingFold`): steps round-robin over
    the dimensions from ``start``, mirrored or not; ``new`` is the rank's position (bit
    d-1-s from step s's dimension's Swing position), ``real(new ^ bit)`` its peer in the step
    of ``bit``."""

    first, pairs = 0, False

    def __init__(self, dims: tuple[int, ...], rank: int, start: int, mirrored: bool) -> None:
        strides = [math.prod(dims[:k]) for k in range(len(dims))]
        coords = [rank // stride % d for stride, d in zip(strides, dims)]
        left = [d.bit_length() - 1 for d in dims]
        order, done, k = [], [0] * len(dims), start
        while len(order) < sum(left):
            if done[k] < left[k]:
                order.append((k, done[k]))
                done[k] += 1
            k = (k + 1) % len(dims)
        self.size, self.rounds, self.new, self.peers = math.prod(dims), len(order), 0, {}
        sign = -1 if mirrored else 1
        for s, (k, t) in enumerate(order):
            x, d, bit = coords[k], dims[k], 1 << (len(order) - 1 - s)
            if swing_position(d, (-x) % d if mirrored else x) >> (left[k] - 1 - t) & 1:
                self.new |= bit
            moved = (x + sign * rho(t) if x % 2 == 0 else x - sign * rho(t)) % d
            self.peers[bit] = rank + (moved - x) * strides[k]

    def real(self, new: int) -> int:
        return self.peers[new ^ self.new]


def _torus_allreduce(call: Call, dims: tuple[int, ...]) -> Program:
    """The 2D concurrent Swing allreduces of the torus ``dims`` (see above)."""
    source, result = allreduce_vectors(call)
    if call.p == 1 or not result.count:
        return one_rank(source, result)
    parts = even_split(result.count, 2 * len(dims))
    programs, scratch = [], 0
    for j, (src, dst) in enumerate(zip(split(source, parts), split(result, parts))):
        part = _TorusPart(dims, call.rank, j % len(dims), j >= len(dims))
        steps = ProgramBuilder(2 * part.rounds)
        used = _rabenseifner_allreduce(call, part, steps, src, dst)
        programs.append(relocate(steps.program(), {SCRATCH: (SCRATCH, scratch)}))
        scratch += used
    return Program(parallel(*programs).steps, scratch)


@register("allreduce", "swing", family="swing", source=_SOURCE, cost=RABENSEIFNER_COST,
          requires=(ON_TORUS,), options=(DIMS,))
def plan_swing_allreduce(call: Call) -> Program:
    """Swing allreduce, bandwidth-optimal: a Swing reduce-scatter of p' blocks (each step
    hands the peer the half of the current blocks it keeps), then the Swing allgather of the
    reduced blocks in reverse step order.

    Rounds 2 log2 p' (+2 when p is not a power of two: the fold and the return); bytes sent
    per rank 2(p'-1)/p' n; time 2 log2 p' alpha + 2(p'-1)/p' n beta + (p'-1)/p' n gamma, as
    Rabenseifner's, with peers at most about 2^(s+1)/3 ranks away instead of 2^s.  Blocks
    are placed by Swing position, so every message is one contiguous region.  Any p,
    IN_PLACE; scratch n/2 (n on folding ranks with IN_PLACE).  With option ``dims`` (a torus,
    see above): 2D concurrent allreduces of n/(2D) each, 2 log2 p rounds of 2D messages.
    """
    dims = torus_dims(call)
    if dims is not None:
        return _torus_allreduce(call, dims)
    return _folded_allreduce(call, 2, _in_swing_numbering(_rabenseifner_allreduce, False))


@register("allreduce", "swing_latency", family="swing", source=_SOURCE,
          cost=DOUBLING_ALLREDUCE_COST, options=())
def plan_swing_latency_allreduce(call: Call) -> Program:
    """Swing allreduce, latency-optimal: in step s each rank swaps its whole partial vector
    with its Swing peer r +/- rho(s) and reduces.

    Rounds log2 p' (+2 when p is not a power of two); bytes sent per rank n per round; time
    log2 p' (alpha + n beta + n gamma), as recursive doubling's, with nearer peers.  For
    short vectors.  Any p, IN_PLACE; scratch n (2n with IN_PLACE in some cases).  Both
    peers of a step reduce their halves in the same order.
    """
    return _folded_allreduce(call, 1, _in_swing_numbering(_doubling_allreduce, True))


def _blocks_of(fold: _Fold, blocks: list[Region], nodes: tuple[int, ...]) -> tuple[Region, ...]:
    """The blocks of the real ranks that the survivors ``nodes`` (sorted) stand for."""
    return merge_adjacent(span(blocks, *fold.ranks(j, j + 1)) for j in nodes)


@register("reduce_scatter", "swing", family="swing", source=_SOURCE,
          cost=Cost(_ROUNDS, f"n * (p - 1 + {_FOLDED})",
                    "⌊log2 p⌋α + (p-1)n(β + γ); p ≠ 2^k: +2α + pn(β + γ) + nβ"),
          options=())
def plan_swing_reduce_scatter(call: Call) -> Program:
    """Swing reduce-scatter: in step s each rank sends its Swing peer r +/- rho(s) the
    partial sums of the blocks the peer reaches by the remaining steps and reduces those it
    reaches itself.

    Rounds log2 p' (+2 when p is not a power of two: the odd ranks of the first 2r fold their
    vectors into their even partners first, which send them their blocks last); bytes sent
    per rank (p'-1)/p' of the vector; time log2 p' alpha + (p-1) n (beta + gamma).  Uneven
    recvcounts, any p.  A step's blocks are not contiguous: its message is several regions,
    packed.  Scratch: the partial sums (the vector) and a landing area of half of it.
    """
    p, rank, counts = call.p, call.rank, call.counts
    total = sum(counts)
    fold = _Fold(p, rank)
    _, result = reduce_scatter_blocks(call)
    held = split(Region(SEND, 0, total), counts)
    if p == 1:
        return one_rank(held[0], result)
    steps = fold.builder(fold.rounds)
    if fold.sits_out:
        return _sit_out(steps, rank - 1, Region(SEND, 0, total), result)
    vector = Region(SCRATCH, 0, total)
    partial = split(vector, counts)
    if fold.pairs:
        steps[0].recv(rank + 1, vector,
                      on_arrival=(Reduce(vector, (vector, Region(SEND, 0, total))),))
        held = partial
        steps[-1].send(rank + 1, partial[rank + 1])
    landing = 0
    for s in range(fold.rounds):
        peer = swing_peer(fold.new, s, fold.size)
        kept = [b for j in reached(fold.size, fold.new, s + 1) for b in range(*fold.ranks(j, j + 1))]
        at, pieces, ops = total, [], []
        for b in kept:
            piece = Region(SCRATCH, at, counts[b])
            at += counts[b]
            pieces.append(piece)
            last = s == fold.rounds - 1 and b == rank
            ops.append(Reduce(result if last else partial[b], (held[b], piece)))
        landing = max(landing, at - total)
        step = steps[fold.first + s]
        step.send(fold.real(peer), *_blocks_of(fold, held, reached(fold.size, peer, s + 1)))
        step.recv(fold.real(peer), *merge_adjacent(pieces), on_arrival=ops)
        held = partial
    return steps.program(total + landing)


@register("allgather", "swing", family="swing", source=_SOURCE,
          # a pair survivor is the busiest: its sets' blocks (the pairs' twice), then all but one
          cost=Cost(_ROUNDS, f"n * (p - 1) + {_FOLDED} * n * ({_P} - 1 + swing_pairs(p))",
                    "⌊log2 p⌋α + (p-1)nβ; p ≠ 2^k: +2α + pnβ and more on the pairs"),
          options=())
def plan_swing_allgather(call: Call) -> Program:
    """Swing allgather, the reduce-scatter's mirror: in step s (last to first) each rank
    sends its Swing peer everything it has gathered, the blocks of the ranks it reaches by
    steps s+1.., and receives the peer's.

    Rounds log2 p' (+2 when p is not a power of two: the odd ranks' blocks are folded into
    their even partners first and everything but their own block is sent back last); bytes
    received per rank all blocks but its own; time log2 p' alpha + (p-1) n beta.  Uneven
    blocks, any p, IN_PLACE; no scratch; messages of several regions, packed.
    """
    started = folded_allgather(call)
    if isinstance(started, Program):
        return started
    fold, result, source, steps = started
    p, rank = call.p, call.rank
    for k in range(fold.rounds):
        s = fold.rounds - 1 - k
        peer = swing_peer(fold.new, s, fold.size)
        mine = reached(fold.size, fold.new, s + 1)
        step = steps[fold.first + k]
        step.send(fold.real(peer), *((source,) if mine == (fold.new,) and not fold.pairs
                                     else _blocks_of(fold, result, mine)))
        step.recv(fold.real(peer), *_blocks_of(fold, result, reached(fold.size, peer, s + 1)))
    if fold.pairs:
        steps[-1].send(rank + 1,
                       *merge_adjacent((span(result, 0, rank + 1), span(result, rank + 2, p))))
    return steps.program()
